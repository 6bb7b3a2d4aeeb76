"""The verdict channel and the worker's lifecycle under attack (issue 20), in both sandbox
modes, through the pool and the CLI. Containment is tests/verify/test_sandbox.py's; here a
candidate tries to turn its own failure into an infrastructure failure (a `sandbox_error` is
masked out of the loss instead of scored: a reward hack), to crash or confuse the host, or to
leave state behind for the next job. Anything a candidate can cause is its own verdict."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from rlvr_jax.types import Status
from rlvr_jax.sandbox import pool as pool_lib
from rlvr_jax.sandbox import bwrap
from rlvr_jax.sandbox.pool import VerifierPool
from tests.helpers import ROOT, UNAVAILABLE

pytestmark = [pytest.mark.slow,  # see pyproject.toml: not in the daily `-m "not slow"` run
              pytest.mark.xdist_group("sandbox"),  # one worker runs every sandbox test
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]
MODES = ["forkserver", "fresh"]


def _job(program, expected=(0,), inputs=((0,),)):
    return {"completion": program, "entry_point": "f", "inputs": [list(a) for a in inputs],
            "expected": list(expected)}


GOOD = _job("def f(x):\n    return x + 1", expected=[1])
WRONG = _job("def f(x):\n    return x + 2", expected=[1])

# Each one a candidate's attempt at a sandbox_error (1a, 1b, 1c) or a host crash (2).
NESTED_DEEP = """import sys
sys.setrecursionlimit(100000)
def f(x):
    v = []
    for _ in range(5000):
        v = [v]
    return v
"""
NESTED_988 = NESTED_DEEP.replace("5000", "988")
FORGED_RESULT = """import os
for fd in range(3, 64):
    try:
        os.write(fd, b'{"status": [], "outputs": []}\\n')
    except OSError:
        pass
os._exit(0)
def f(x):
    return x
"""
SIGNALS_PID1 = """import os, signal
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGQUIT,
            signal.SIGALRM, signal.SIGPIPE, signal.SIGCHLD):
    try:
        os.kill(1, sig)
    except OSError:
        pass
def f(x):
    return x + 1
"""
ATTACKS = {"nested_5000": NESTED_DEEP, "nested_988": NESTED_988, "forged_result": FORGED_RESULT,
           "signals_to_pid1": SIGNALS_PID1}


@pytest.fixture(scope="module", params=MODES)
def pool(request):
    with VerifierPool("code", workers=2, timeout_s=10.0, mode=request.param) as p:
        yield p


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_candidate_cannot_force_a_sandbox_error_or_crash_the_host(pool, attack):
    """1a nested past the worker's parser, 1b a forged result line of the wrong type, 1c every
    signal at the worker (pid 1), 2 nested past the host's parser: each is the candidate's
    verdict, `verify` returns, and the pool answers the next job correctly."""
    got = pool.verify([_job(ATTACKS[attack], expected=[1]),
                       dict(GOOD, inputs=[[0]], expected=[1])])
    assert got[0].status != Status.SANDBOX_ERROR, got[0]
    if attack == "signals_to_pid1":  # the worker ignored them; the candidate ran to the end
        assert got[0].status == Status.PASS, got[0]
    else:
        assert got[0].status in (Status.RUNTIME_ERROR, Status.OUTPUT_LIMIT), got[0]
    assert got[1].status == Status.PASS, got[1]
    assert [v.status for v in pool.verify([dict(WRONG, inputs=[[7]], expected=[8])])] == \
        [Status.WRONG]


def test_the_cli_writes_a_verdict_for_every_line(tmp_path):
    """Item 2 through `python -m rlvr_jax.verify`: the hostile line is scored, the rest too."""
    src, dst = tmp_path / "jobs.jsonl", tmp_path / "verdicts.jsonl"
    jobs = [GOOD, _job(NESTED_988, expected=[1]), _job(NESTED_DEEP, expected=[1]), WRONG]
    src.write_text("".join(json.dumps(dict(j, id=n)) + "\n" for n, j in enumerate(jobs)))
    proc = subprocess.run([sys.executable, "-m", "rlvr_jax.verify", "--kind", "code",
                           "--input", str(src), "--output", str(dst)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    statuses = [json.loads(line)["status"] for line in dst.read_text().splitlines()]
    assert len(statuses) == 4 and statuses[0] == "pass" and statuses[3] == "wrong"
    assert "sandbox_error" not in statuses


@pytest.mark.parametrize("mode", MODES)
def test_verdicts_never_shift_after_an_aborted_batch(mode, monkeypatch):
    """Item 3: a batch aborted by an exception after its jobs were sent leaves replies in
    flight; the next batch on the same pool gets its own verdicts, matched by job id."""
    with VerifierPool("code", workers=2, timeout_s=10.0, mode=mode) as p:
        real_select = pool_lib.select.select
        calls = {"n": 0}

        def failing_select(*args):
            calls["n"] += 1
            if calls["n"] == 1:
                time.sleep(0.5)  # let the replies arrive, then abort the batch
                raise KeyboardInterrupt("the caller stopped this batch")
            return real_select(*args)

        monkeypatch.setattr(pool_lib.select, "select", failing_select)
        with pytest.raises(KeyboardInterrupt):
            p.verify([dict(GOOD, inputs=[[1]], expected=[2]),
                      dict(WRONG, inputs=[[1]], expected=[2])])
        monkeypatch.setattr(pool_lib.select, "select", real_select)
        got = p.verify([dict(WRONG, inputs=[[3]], expected=[4]),
                        dict(GOOD, inputs=[[3]], expected=[4])])
        assert [v.status for v in got] == [Status.WRONG, Status.PASS]


LEAVE_STATE = """import os, ctypes, stat
def f(x):
    os.makedirs('/tmp/locked/inner', exist_ok=True)
    open('/tmp/locked/inner/secret', 'w').write('left behind')
    os.chmod('/tmp/locked/inner', 0o500)
    os.chmod('/tmp/locked', 0o500)
    written = 0
    try:
        with open('/dev/shm/big', 'wb') as fh:
            for _ in range(200):
                fh.write(b'x' * (1 << 20))
                written += 1
    except OSError:
        pass
    dev_writable = True
    try:
        open('/dev/planted', 'w').write('x')
    except OSError:
        dev_writable = False
    libc = ctypes.CDLL(None, use_errno=True)
    shm = libc.shmget(0x5EED, 1 << 20, 0o1000 | 0o600)  # IPC_CREAT
    msg = libc.msgget(0x5EED, 0o1000 | 0o600)
    return [written < 200, dev_writable, shm >= 0, msg >= 0]
"""
READ_STATE = """import os
def f(x):
    left = []
    for d in ('/tmp', '/dev/shm'):
        left += [os.path.join(d, n) for n in os.listdir(d)]
    left += [n for n in os.listdir('/dev') if n == 'planted']
    for name in ('shm', 'msg', 'sem'):
        with open('/proc/sysvipc/' + name) as fh:
            left += [name + ': ' + line.split()[1] for line in fh.read().splitlines()[1:]]
    return left
"""


@pytest.mark.parametrize("mode", MODES)
def test_nothing_of_a_job_remains_for_the_next(mode):
    """Item 4: /tmp (a 0500 directory included) and /dev/shm are emptied after every job;
    /dev/shm holds at most its cap; /dev itself is read-only; System V IPC cannot be made at
    all (the seccomp filter), so none outlives a job."""
    with VerifierPool("code", workers=1, timeout_s=20.0, mode=mode) as p:
        # [/dev/shm capped, /dev writable, made a SysV segment, made a SysV queue]
        first = p.verify([_job(LEAVE_STATE, expected=[[True, False, False, False]])])[0]
        assert first.status == Status.PASS, first.detail
        second = p.verify([_job(READ_STATE, expected=[[]])])[0]
        assert second.status == Status.PASS, second.detail


@pytest.mark.parametrize("mode", MODES)
def test_an_oversized_result_is_an_output_limit_within_the_deadline(mode):
    """Item 5: a 15 MB result (under the old 16 MiB pipe cap) is the candidate's output_limit, decided inside the job's
    deadline, never parsed whole on the host."""
    big = "def f(x):\n    return 'x' * (15 << 20)\n"
    with VerifierPool("code", workers=1, timeout_s=10.0, mode=mode) as p:
        t0 = time.monotonic()
        got = p.verify([_job(big, expected=["x"])])[0]
        assert got.status == Status.OUTPUT_LIMIT, got
        assert time.monotonic() - t0 < 10.0


def _sandbox_leftovers(launched: set, prefix: str = "rlvr_") -> tuple[set[str], list[str]]:
    """Live processes of the sandboxes this test launched (`launched`: their launchers'
    pids, each the leader of its session; bwrap's own children below them), and this
    process's cgroups. Sandboxes of other test runs, or of a training run on the same
    machine, are not counted."""
    stats = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            stats[int(pid)] = (int(fields[1]), int(fields[3]))  # ppid, session
    ours = {p for p, (_, sid) in stats.items() if p in launched or sid in launched}
    while True:  # and whatever those started (bwrap's sandboxed child: a session of its own)
        more = {p for p, (pp, _) in stats.items() if pp in ours} - ours
        if not more:
            break
        ours |= more
    groups = []
    for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu",
                 "/sys/fs/cgroup"):
        if os.path.isdir(root):
            groups += [os.path.join(root, d) for d in os.listdir(root)
                       if d.startswith(prefix + str(os.getpid()) + "_")]
    return {str(p) for p in ours}, groups


@pytest.mark.parametrize("mode", MODES)
def test_close_leaves_no_process_and_no_cgroup(mode, monkeypatch):
    """Item 6: 50 open/close cycles, each closing with a replacement worker still starting
    (a timed-out job's worker was just replaced), leave no sandbox process and no cgroup of
    ours. Only this test's own sandboxes are counted (every launch recorded)."""
    launched: set = set()
    spawn = bwrap.spawn

    def recorded(*args, **kwargs):
        proc = spawn(*args, **kwargs)
        launched.add(proc.pid)
        return proc

    monkeypatch.setattr(bwrap, "spawn", recorded)
    _, groups_before = _sandbox_leftovers(launched)

    def leftovers():
        procs, groups = _sandbox_leftovers(launched)
        return sorted(procs), sorted(set(groups) - set(groups_before))

    for i in range(50):
        p = VerifierPool("code", workers=2, timeout_s=0.3, mode=mode)
        if i % 5 == 0:  # a timeout: the worker is killed and a replacement spawned
            p.verify([_job(f"import time\ntime.sleep(5)\ndef f(x):\n    return {i}")])
        p.close()
    assert len(launched) >= 100
    deadline = time.monotonic() + 5
    while leftovers() != ([], []) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers() == ([], [])


def test_the_sandbox_runs_from_a_private_checkout(tmp_path):
    """Item 7: the package copied into a directory of mode 0700 (what `mktemp -d` makes, or a
    checkout under /root) still runs candidates in the sandbox."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o700)
    shutil.copytree(os.path.join(ROOT, "rlvr_jax"), private / "rlvr_jax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = ("import json, sys\n"
              "from rlvr_jax.sandbox.pool import VerifierPool\n"
              f"job = json.loads({json.dumps(json.dumps(GOOD))})\n"
              "with VerifierPool('code', workers=1, mode='forkserver') as p:\n"
              "    print(p.verify([job])[0].status.name)\n")
    env = dict(os.environ, PYTHONPATH=str(private))
    proc = subprocess.run([sys.executable, "-c", script], cwd=str(private), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "PASS"
