"""The sandboxed findings of the third outside audit (issue 36), in both sandbox modes where a
sandbox is involved: one job must not poison the jobs after it in its worker (metadata on the
wiped mounts, kernel keys), a dataset's test replayed on candidate values must be bounded in
time and memory and never run on the host, a batch's deadline must not mask honest
batch-mates of a looping sample, and the trainer's interpreter is bound minimally and in its
own order. Each test failed on the code before the fix. Needs bubblewrap (skipped with the
reason locally without it; a failure in CI, which installs it). The reasoning-gym forgeries:
test_gym_score.py; the evaluation's isolation itself: test_isolated_eval.py."""

import json
import os
import resource
import subprocess
import sys
import time

import pytest

from rlvr_jax.data import code_tests
from rlvr_jax.types import Status
from rlvr_jax.sandbox import bwrap
from rlvr_jax.sandbox.cgroup import Cgroup
from rlvr_jax.sandbox.pool import VerifierPool
from tests.helpers import UNAVAILABLE

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sandbox"),
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]
MODES = ["forkserver", "fresh"]

# A default ACL of read-only entries (user::r--, group::r--, other::r--) on /tmp's root, a
# user attribute beside it, and a key in the user keyring: each survived the wipe.
POISON = r'''
import ctypes, os, struct
def f(x):
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 4, 0xFFFFFFFF)
                                          for tag in (1, 4, 0x20))
    out = []
    for root in ("/tmp", "/dev/shm"):
        for name, value in (("system.posix_acl_default", acl), ("user.poison", b"1")):
            try:
                os.setxattr(root, name, value)
                out.append("set")
            except OSError as e:
                out.append(e.errno)
    libc = ctypes.CDLL(None, use_errno=True)
    key = libc.syscall(248, b"user", b"rlvr", b"secret", 6, -4)  # add_key(..., USER_KEYRING)
    out.append(ctypes.get_errno() if key < 0 else "key")
    return out
'''
HONEST_FILES = ("def f(x):\n    for p in ('/tmp/a.txt', '/dev/shm/b.txt'):\n"
                "        open(p, 'w').write('one')\n        open(p, 'w').write('two')\n"
                "    return open('/tmp/a.txt').read() + open('/dev/shm/b.txt').read()")
STDIO = "print(int(input()) + 1)"


def _call(program, expected, inputs=((0,),)):
    return {"completion": program, "entry_point": "f", "inputs": [list(a) for a in inputs],
            "expected": list(expected)}


def _honest_batch(tag):
    return [_call(HONEST_FILES + f"  # {tag}", ["twotwo"]),
            {"completion": STDIO + f"  # {tag}", "stdin": ["1\n", "2\n", "3\n"],
             "expected_stdout": ["2", "3", "4"]}]


@pytest.mark.parametrize("mode", MODES)
def test_metadata_and_keys_are_denied_and_cannot_poison_the_next_jobs(mode):
    """Finding 2: after the poisoning job, every multi-case stdin job of the worker failed in
    our own harness and honest programs that rewrite files failed; the key outlived it all."""
    with VerifierPool("code", workers=1, timeout_s=10.0, mode=mode) as p:
        for k in range(3):  # a poisoning job in every batch, the same worker (forkserver)
            got = p.verify([_call(POISON + f"# {k}", [None]), *_honest_batch(k)])
            assert "0/1 tests; test 0: got [1, 1, 1, 1, 1]" in got[0].detail  # EPERM x5
            assert [v.status for v in got[1:]] == [Status.PASS, Status.PASS], got
        if mode == "forkserver":
            assert p.restarts == 0  # nothing had to be recycled: nothing was left


def test_without_the_filter_the_wipe_resets_the_roots_metadata(monkeypatch):
    """A host without the seccomp filter (an architecture it does not list): the attributes
    can be set, and the cleanup removes them (and probes the roots) before the next job."""
    monkeypatch.setattr(bwrap, "seccomp_fd", lambda: None)
    with VerifierPool("code", workers=1, timeout_s=10.0, mode="forkserver") as p:
        for k in range(3):
            got = p.verify([_call(POISON + f"# {k}", [None]), *_honest_batch(k)])
            assert "'set', 'set', 'set', 'set'" in got[0].detail, got[0].detail
            assert [v.status for v in got[1:]] == [Status.PASS, Status.PASS], got


# ----------------------------------------------------------------------------- 3: the replay
REPLAYED = {"test_list": ["assert sum(range(f(3))) == 3", "assert len('ab' * f(2)) == 4"],
            "code": "def f(x):\n    return 3 if x == 3 else 2"}


@pytest.mark.parametrize("mode", MODES)
def test_a_datasets_test_on_candidate_values_is_bounded_and_off_the_host(mode):
    """Finding 3: the host replayed these asserts on the values returned, unbounded: 10**13
    kept verify() running 40 s past its deadline; 10**9 grew the trainer by 1.4 GB."""
    tests = code_tests.tests_of(REPLAYED, "row:1")
    jobs = [dict(tests, completion=c) for c in (
        "def f(x):\n    return 3 if x == 3 else 2",  # right
        "def f(x):\n    return 10**13",  # the test loops on it
        "def f(x):\n    return 3 if x == 3 else 10**9")]  # the test allocates 2 GB on it
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with VerifierPool("code", workers=2, timeout_s=10.0, batch_timeout_s=30.0, mode=mode) as p:
        t0 = time.monotonic()
        got = p.verify(jobs)
        took = time.monotonic() - t0
    assert [v.status for v in got[:2]] == [Status.PASS, Status.TIMEOUT], got
    assert got[2].status in (Status.WRONG, Status.MEMORY_LIMIT), got[2]
    assert took < 8.0  # the replay's own limit (3 s), not the host's patience
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 200_000  # KB


# ----------------------------------------------------------------------------- 4: shares
@pytest.mark.parametrize("mode", MODES)
def test_looping_calls_are_their_own_timeouts_and_never_mask_honest_ones(mode):
    """Finding 4: six looping `python` calls in one turn masked the turn's two honest calls
    (`sandbox_error`, out of the loss) and themselves, at the batch deadline."""
    loops = [{"tool": "python", "arguments": {"code": f"while True: pass  # {k}"}}
             for k in range(6)]
    honest = [{"tool": "python", "arguments": {"code": f"print({k} * 2)"}} for k in (3, 4)]
    with VerifierPool("tool_run", workers=2, timeout_s=5.0, batch_timeout_s=8.0,
                      mode=mode) as p:
        t0 = time.monotonic()
        got = p.verify(loops + honest)
        assert time.monotonic() - t0 < 10.0
    assert [v.status for v in got] == [Status.TIMEOUT] * 6 + [Status.PASS] * 2, got
    assert [v.detail for v in got[6:]] == ["6\n", "8\n"]


# ----------------------------------------------------------------------------- 5: binds
def _run(python, program, fn="f", args=()):
    """One job in a fresh sandbox running `python` (bwrap.TrainerPython): its reply."""
    proc = bwrap.spawn(once=True, python=python)
    try:
        assert json.loads(proc.stdout.readline()) == {"ready": 1}
        job = {"id": 1, "program": program, "calls": [{"fn": fn, "args": list(args)}],
               "limits": {"memory_mb": 3072, "cpu_s": 5, "processes": 8, "file_mb": 1,
                          "open_files": 64, "wall_s": 10.0, "output_bytes": 1 << 16}}
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())
    finally:
        bwrap.kill(proc)


def test_only_the_interpreter_and_its_libraries_are_bound():
    """Finding 1's second half: the interpreter's prefix was bound whole (its bin/, include/,
    share/, whatever else lies there); now only the binary, libpython, the standard library
    and the site directories, which come first on the path in the trainer's order."""
    python = bwrap.TrainerPython()
    prefix = os.path.realpath(sys.base_prefix)
    program = ("import os, sys\ndef f(prefix):\n    return [sorted(os.listdir(os.path.join("
               "prefix, 'bin'))), os.path.exists(os.path.join(prefix, 'include')), sys.path]")
    reply = _run(python, program, args=[prefix])
    assert reply["status"] == "ok", reply
    listed, include, path = reply["outputs"][0]["value"]
    assert listed == [os.path.basename(python.executable())] and not include
    sites = [p for p in path if p.startswith(bwrap.SITE_ROOT)]
    assert sites[:len(python.site_dirs())] == [f"{bwrap.SITE_ROOT}/{k}" for k in
                                                range(len(python.site_dirs()))]
    assert not any(os.path.basename(p) == "site-packages" for p in path)  # no other install


def test_a_venv_under_tmp_is_the_one_imported(tmp_path):
    """Finding 5: a trainer venv under /tmp was hidden by the sandbox's own /tmp, and the
    worker silently imported another install's package. Now its site directory is bound at
    /opt/rlvr/site/<k>, so the venv's own copy is found, first."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "rlvr_probe_mod.py").write_text("WHERE = 'the venv'\n")
    code = ("import json, sys\nfrom rlvr_jax.sandbox import bwrap\n"
            "from tests.verify.test_third_audit import _run\n"
            "r = _run(bwrap.TrainerPython(preload=('rlvr_probe_mod',)), "
            "'import rlvr_probe_mod\\ndef f():\\n    return rlvr_probe_mod.WHERE')\n"
            "print(json.dumps(r))")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                         text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(
                             os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1])["outputs"] == [{"value": "the venv"}]


def test_an_interpreter_the_sandbox_cannot_show_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(bwrap.TrainerPython, "executable",
                        staticmethod(lambda: "/tmp/somewhere/bin/python3"))
    with pytest.raises(bwrap.SandboxUnavailable, match="/tmp/somewhere/bin/python3.*/tmp"):
        bwrap.TrainerPython().binds()


@pytest.mark.skipif(os.geteuid() != 0, reason="the mount points exist for a root trainer")
def test_bind_folders_go_at_close_and_a_killed_trainers_at_the_next_start(tmp_path):
    import tempfile

    pytest.importorskip("reasoning_gym")
    stale = tempfile.mkdtemp(prefix="rlvr-bind-999999999-")  # no such pid
    os.mkdir(os.path.join(stale, "0"))
    bwrap.MOUNT_POINTS.remove()  # as at a fresh start of this process
    with VerifierPool("reasoning_gym", workers=1, timeout_s=20.0) as p:
        p.verify([{"dataset": "chain_sum", "config": {}, "seed": 0, "index": 1,
                   "completion": "<answer>1</answer>"}])
        folder = bwrap.MOUNT_POINTS.folder
        assert folder and os.path.isdir(folder) and not os.path.exists(stale)
    assert not os.path.exists(folder)


@pytest.mark.skipif(not (os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup/memory")),
                    reason="needs root with cgroup v1 (the v2 path is the same code)")
def test_a_killed_trainers_empty_cgroups_are_removed_at_the_next_start(monkeypatch):
    path = "/sys/fs/cgroup/memory/rlvr_999999999_1_1"  # a pid that does not exist
    live = f"/sys/fs/cgroup/memory/rlvr_{os.getpid()}_1_999"  # ours: kept
    for p in (path, live):
        os.makedirs(p, exist_ok=True)
    try:
        monkeypatch.setattr(Cgroup, "_STALE_CHECKED", False)
        # -1: any age (cgroupfs stamps a new folder's mtime coarsely: "older than 0 s" could
        # be false for one made an instant ago, and the test failed once on that)
        removed = Cgroup.remove_stale(min_age_s=-1.0)
        assert path in removed and not os.path.exists(path) and os.path.exists(live)
    finally:
        for p in (path, live):
            if os.path.exists(p):
                os.rmdir(p)
