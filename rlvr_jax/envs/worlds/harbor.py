"""A Harbor task's environment (tasks/harbor.py loads the task directories): the agent works
in /app, seeded from the task's environment/ files, with a shell and file tools; the reward
is the task's tests/test.sh run on the final /app in a fresh verification sandbox, where the
tests are at /tests and the script writes its reward to /logs/verifier/reward.txt (a number,
1 passes) or reward.json ({"reward": x}). The tests never enter the agent's session; they
run the agent's code with the script's rights, as in Harbor (envs/README.md says what that
leaves open).

Task context: {"setup": {"files": {path: base64}},
               "goal": {"tests": {path: base64}, "timeout_s": seconds}}"""

import base64
import os
import signal
import subprocess

# A module here runs alone in its sessions (only its own source is shipped): its file tools
# repeat workspace.py's rather than import them.

WORKSPACE = "/app"
ARTIFACTS = ["*"]
_MAX_READ = 8000


def _inside(path):
    full = os.path.realpath(os.path.join(WORKSPACE, path))
    if not (full == WORKSPACE or full.startswith(WORKSPACE + os.sep)):
        raise ValueError("the path leaves /app")
    return full


def bash(command: str) -> str:
    """Run a shell command in /app; its output and exit code come back."""
    done = subprocess.run(["bash", "-c", command], cwd=WORKSPACE, capture_output=True,
                          text=True, timeout=60)
    return (done.stdout + done.stderr)[-4000:] + f"\n(exit code {done.returncode})"


def read_file(path: str) -> str:
    """A file's text (the first 8000 characters)."""
    with open(_inside(path), encoding="utf-8", errors="replace") as f:
        return f.read(_MAX_READ)


def write_file(path: str, content: str) -> str:
    """Write a file (made, or replaced whole)."""
    full = _inside(path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(content)
    return f"wrote {len(content)} characters to {path}"


def _unpack(root, files):
    for path, data in files.items():
        full = os.path.normpath(os.path.join(root, path))
        if not full.startswith(root + os.sep):
            continue
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(base64.b64decode(data) if isinstance(data, str) else data)
        if full.endswith(".sh"):
            os.chmod(full, 0o755)


def setup(files: dict = None):
    _unpack(WORKSPACE, files or {})


def _running_others():
    """Processes of this box (its own /proc) other than this one and pid 1, zombies apart."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in (1, os.getpid()):
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(int(pid))
        except (OSError, IndexError):
            continue
    return out


def check(files, goal):
    import json

    _unpack(WORKSPACE, files)
    _unpack("/tests", goal.get("tests", {}))
    os.makedirs("/logs/verifier", exist_ok=True)
    # The tests run the agent's code with this script's rights, as in Harbor. So the script
    # runs from memory (bash reads a script file as it goes: the agent's code could rewrite
    # the rest of it), its output goes to a file (a pipe waits for whoever holds it), and a
    # script killed by a signal, or one that leaves a process running that could write the
    # reward after it, scores 0.
    with open("/tests/test.sh") as f:
        script = f.read()
    with open("/logs/test_output.txt", "wb") as out:
        proc = subprocess.Popen(["bash", "-c", script, "/tests/test.sh"], cwd=WORKSPACE,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        try:
            code = proc.wait(timeout=float(goal.get("timeout_s", 60)))
        except subprocess.TimeoutExpired:
            code = None
    left = _running_others()
    try:
        os.kill(-1, signal.SIGKILL)  # every process of this box but this one and its pid 1
    except OSError:
        pass
    if code is None or code < 0 or left:
        return 0.0
    for name in ("reward.txt", "reward.json"):
        path = os.path.join("/logs/verifier", name)
        if os.path.exists(path):
            with open(path) as f:
                text = f.read().strip()
            try:
                value = json.loads(text)
            except ValueError:
                return 0.0
            if isinstance(value, dict):
                value = value.get("reward", 0.0)
            return float(value) if isinstance(value, (int, float)) else 0.0
    return 0.0
