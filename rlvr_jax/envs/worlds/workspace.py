"""A workspace: a directory seeded from the task's files, with tools to list, read, write and
edit files and to run a program or the visible tests. The reward is the task's hidden tests
run on the final workspace in a separate box: each hidden case calls the task's function on
its arguments in a subprocess (the agent's code never runs in the checking process) and
compares the value it returns with the expected one there.

Task context: {"setup": {"files": {path: text}, "visible_tests": path?},
               "goal": {"module": "solution.py", "function": "f", "cases": [[args, expected]]}}"""

import os
import subprocess
import sys

ARTIFACTS = ["*.py", "*.txt", "*.json", "*.md"]
_ROOT = os.getcwd()
_VISIBLE = {"path": ""}
_MAX_READ = 8000


def _inside(path):
    full = os.path.realpath(os.path.join(_ROOT, path))
    if not (full == _ROOT or full.startswith(_ROOT + os.sep)):
        raise ValueError("the path leaves the workspace")
    return full


def list_files() -> str:
    """The workspace's files, one per line, with their sizes."""
    rows = []
    for top, dirs, names in os.walk(_ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            full = os.path.join(top, name)
            rows.append(f"{os.path.relpath(full, _ROOT)} ({os.path.getsize(full)} bytes)")
    return "\n".join(rows) or "(empty)"


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


def edit_file(path: str, old: str, new: str) -> str:
    """Replace the one occurrence of `old` in a file with `new`."""
    full = _inside(path)
    with open(full, encoding="utf-8") as f:
        text = f.read()
    count = text.count(old)
    if count != 1:
        raise ValueError(f"`old` occurs {count} times in {path} (it must occur once)")
    with open(full, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))
    return f"edited {path}"


def run(path: str) -> str:
    """Run a Python file of the workspace; its output and exit code come back."""
    done = subprocess.run([sys.executable, "-B", "-E", "-s", _inside(path)], cwd=_ROOT,
                          capture_output=True, text=True, timeout=10)
    return (done.stdout + done.stderr)[-4000:] + f"\n(exit code {done.returncode})"


def run_tests() -> str:
    """Run the task's visible tests; their output and exit code come back."""
    if not _VISIBLE["path"]:
        raise ValueError("this task has no visible tests")
    return run(_VISIBLE["path"])


def setup(files: dict = None, visible_tests: str = ""):
    for path, text in (files or {}).items():
        write_file(path, text)
    _VISIBLE["path"] = visible_tests


def check(files, goal):
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        for path, data in files.items():
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
        module = goal["module"][:-3] if goal["module"].endswith(".py") else goal["module"]
        cases = goal["cases"]
        runner = ("import json, sys\nsys.path.insert(0, '.')\n"
                  f"from {module} import {goal['function']} as f\n"
                  "args = json.loads(sys.stdin.read())\n"
                  "out = []\n"
                  "for a in args:\n"
                  "    try:\n"
                  "        out.append({'value': f(*a)})\n"
                  "    except Exception as e:\n"
                  "        out.append({'error': type(e).__name__})\n"
                  "sys.stdout.write('\\n' + json.dumps(out))\n")
        try:
            done = subprocess.run([sys.executable, "-B", "-I", "-c", runner], cwd=root,
                                  input=json.dumps([c[0] for c in cases]), capture_output=True,
                                  text=True, timeout=10)
            got = json.loads(done.stdout.rsplit("\n", 1)[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            return 0.0
        if not isinstance(got, list) or len(got) != len(cases):
            return 0.0
        passed = sum(isinstance(g, dict) and "value" in g and g["value"] == c[1]
                     for g, c in zip(got, cases))
        return passed / len(cases)
