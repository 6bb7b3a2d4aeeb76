"""The sandboxed findings of the second outside audit (issue 24), in both sandbox modes: a
candidate must not end the host's call, mask its own verdict as a sandbox error (out of the
loss, with an imputed group reward), or change another sample's verdict. Each test failed on
the code before the fix. Needs bubblewrap (skipped with the reason locally without it; a
failure in CI, which installs it)."""

import os
import time

import pytest

from rlvr_jax.types import Status
from rlvr_jax.sandbox.pool import VerifierPool
from tests.helpers import UNAVAILABLE

pytestmark = [pytest.mark.slow,  # see pyproject.toml: not in the daily `-m "not slow"` run
              pytest.mark.xdist_group("sandbox"),  # one worker runs every sandbox test
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]
MODES = ["forkserver", "fresh"]


def _job(program, expected=(0,), inputs=((0,),)):
    return {"completion": program, "entry_point": "f", "inputs": [list(a) for a in inputs],
            "expected": list(expected)}


def _honest(tag):
    """A correct program, distinct per call (the verdict cache never answers it)."""
    return _job(f"def f(x):\n    return x + 1  # {tag}", expected=[1])


@pytest.fixture(scope="module", params=MODES)
def pool(request):
    with VerifierPool("code", workers=2, timeout_s=10.0, mode=request.param) as p:
        yield p


# ----------------------------------------------------------------------------- 1: no crash
def test_a_huge_returned_int_is_scored_through_the_pool(pool):
    """`def f(x):return x**999` through the codegen task's own path: the host's comparison
    raised and the step died."""
    job = {"completion": "def f(x):return x**999", "entry_point": "f",
           "inputs": [[0], [1], [5], [-3], [12]], "expected": [37, 40, 52, 28, 73]}
    assert pool.verify([job])[0].status == Status.WRONG


def test_tool_calls_that_broke_the_host_are_scored():
    forge = ("import os\nfor fd in range(3, 64):\n    try: os.write(fd, b'{\\\"status\\\": "
             "\\\"ok\\\", \\\"outputs\\\": [{\\\"error\\\": 5}]}\\\\n')\n    except OSError: pass"
             "\nos._exit(0)")
    import json
    calls = [
        ('{"tool": 7, "arguments": {}}', 1, Status.UNPARSEABLE),
        ('{"tool": "calculator", "arguments": {"expression": "9**999"}}', 2.5, Status.WRONG),
        (json.dumps({"tool": "python", "arguments": {"code": forge}}), 1, Status.RUNTIME_ERROR),
        ('{"tool": "calculator", "arguments": {"expression": "1+1"}}' + ' {"a": ' * 3000, 2,
         Status.PASS),
    ]
    with VerifierPool("tool", workers=1, timeout_s=10.0) as p:
        got = p.verify([{"completion": c, "expected": e} for c, e, _ in calls])
    assert [v.status for v in got] == [s for _, _, s in calls], [v.detail for v in got]


# ----------------------------------------------------------------------------- 2: no masking
SYSV_SHM = """import ctypes
def f(x):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    shm = libc.shmget(0, 1900 << 20, 0o1000 | 0o600)
    if shm < 0:
        return 'denied %d' % ctypes.get_errno()
    addr = libc.shmat(shm, None, 0)
    ctypes.memset(addr, 1, 1900 << 20)
    libc.shmdt(ctypes.c_void_p(addr))
    return len(bytearray(200 << 20))
"""


def test_system_v_memory_outside_processes_cannot_be_made(pool):
    """Findings 2a and 4: shared memory attached, touched and detached sits in no process; the
    OOM killer then took the worker (sandbox_error, masked), and without a cgroup it pinned
    host RAM past every rlimit. The seccomp filter denies System V IPC: EPERM (1)."""
    v = pool.verify([_job(SYSV_SHM, expected=["denied 1"])])[0]
    assert v.status == Status.PASS, v.detail


OUT_OF_PROCESS = """import os
def f(x):
    try:  # undo the worker's choice of victim (refused: the file is not the candidate's)
        with open('/proc/self/oom_score_adj', 'w') as fh:
            fh.write('0')
    except OSError:
        pass
    for d in ('/tmp', '/dev/shm'):
        for k in range(4):  # files of 15 MB (the file size limit is 16)
            with open('%s/fill%d' % (d, k), 'wb') as fh:
                fh.write(b'1' * (15 << 20))
    return len(bytearray(40 << 20))
"""


@pytest.mark.parametrize("mode", MODES)
def test_an_oom_in_the_sandbox_is_the_candidates_memory_limit(mode):
    """Finding 2a, the class: memory charged to the sandbox's cgroup in no process (tmpfs
    files here), the candidate's own OOM priority lowered, then an allocation. Whoever the OOM
    killer takes, the worker or the child, the job is the candidate's memory_limit (read from
    the cgroup's OOM count), never `worker died twice` (sandbox_error)."""
    with VerifierPool("code", workers=1, timeout_s=10.0, mode=mode,
                      memory_mb_per_sandbox=128) as p:
        if not p.containment.startswith("cgroup"):
            pytest.skip(f"no cgroup here ({p.containment}): nothing counts OOM kills")
        v = p.verify([_job(OUT_OF_PROCESS, expected=[0])])[0]
        assert v.status == Status.MEMORY_LIMIT, v.detail
        assert p.verify([_honest("after oom")])[0].status == Status.PASS


# ----------------------------------------------------------------------------- 3: isolation
MANY_DIRS = """import os
def f(x):
    for i in range(150000):
        os.mkdir('/tmp/%d' % i)
    return 0
"""


def test_a_previous_jobs_cleanup_is_not_on_the_next_jobs_clock():
    """Finding 3: 150k empty directories; the wipe ran after the reply, on the next job's
    deadline (a 1 s job deadline here: an honest job timed out)."""
    with VerifierPool("code", workers=1, timeout_s=1.5, mode="forkserver") as p:
        p.timeout_s = 15.0  # making the directories takes a few seconds
        assert p.verify([_job(MANY_DIRS)])[0].status == Status.PASS
        p.timeout_s = 1.5
        v = p.verify([_honest("after many dirs")])[0]
        assert v.status == Status.PASS, v.detail
        assert v.latency_s < 1.0


DEEP_TREE = """import os
def f(x):
    os.chdir('/tmp')
    for _ in range({depth}):
        os.mkdir('{name}')
        os.chdir('{name}')
    for k in range({mb} // 15):
        with open('secret%d' % k, 'wb') as fh:
            fh.write(b's' * (15 << 20))
    os.chmod('.', 0o500)
    return 0
"""
READ_TMP = """import os
def f(x):
    left = os.listdir('/tmp') + os.listdir('/dev/shm')
    for k in range(3):  # ENOSPC if a previous job's bytes were still there
        with open('/tmp/big%d' % k, 'wb') as fh:
            fh.write(b'0' * (15 << 20))
    return left
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_tree_past_path_max_does_not_survive_for_the_next_job(mode):
    """Finding 3: a tree nested past PATH_MAX survived the wipe: its contents were readable 22
    jobs later and its bytes made honest jobs fail with ENOSPC."""
    tree = DEEP_TREE.format(depth=40, name="d" * 200, mb=45)  # 8000-character paths
    with VerifierPool("code", workers=1, timeout_s=10.0, mode=mode) as p:
        assert p.verify([_job(tree)])[0].status == Status.PASS
        for i in range(3):
            v = p.verify([_job(READ_TMP + f"# {i}", expected=[[]])])[0]
            assert v.status == Status.PASS, v.detail


def test_a_deep_tree_costs_no_worker_restart():
    """Finding 3: a ~1000-deep /tmp tree crashed the worker in its (recursive) cleanup after
    it had replied: a restart per job."""
    tree = DEEP_TREE.format(depth=1500, name="d", mb=0)
    with VerifierPool("code", workers=1, timeout_s=10.0, mode="forkserver") as p:
        for i in range(3):
            assert p.verify([_job(tree + f"# {i}")])[0].status == Status.PASS
        assert p.verify([_job(READ_TMP, expected=[[]])])[0].status == Status.PASS
        assert p.restarts == 0


SPINNERS = """import os, time
def f(x):
    for _ in range(30):
        if os.fork() == 0:
            os.setsid()  # a session (and scheduling autogroup) of its own
            t = time.monotonic()
            while time.monotonic() - t < 5:
                pass
            os._exit(0)
    time.sleep(5)
    return 0
"""
WORK = """import time
def f(x):
    t = time.process_time()
    while time.process_time() - t < 0.4:  # 0.4 s of CPU
        pass
    return x
"""


def test_one_sandbox_cannot_starve_another_into_a_timeout():
    """Finding 3: 30 processes that each call setsid() starved an honest job in the other
    sandbox into a timeout 3 times in 4. Each sandbox has its own CPU share (cgroup cpu)."""
    if os.geteuid() != 0 or not (os.path.isdir("/sys/fs/cgroup/cpu")
                                 or os.path.exists("/sys/fs/cgroup/cgroup.controllers")):
        pytest.skip("no cgroup cpu controller this process can use")
    with VerifierPool("code", workers=2, timeout_s=10.0, mode="forkserver") as p:
        honest = dict(_job(WORK, expected=[3], inputs=[[3]]))
        got = p.verify([_job(SPINNERS), honest])
        assert got[1].status == Status.PASS, got[1].detail
        assert got[1].latency_s < 4.0  # its 0.4 s of CPU at a fair share of 2 cores


def test_a_job_past_its_share_is_its_own_timeout_and_the_next_still_runs():
    """Finding 3 of the second audit (a job the batch deadline left unstarted got a scored
    `timeout`), as the third audit's finding 4 refined it: the sleeper uses more than its
    share of the batch's time (2 s of 4 for 2 jobs on 1 worker), so it is its own TIMEOUT, and the
    honest job after it still runs within the batch's deadline (pool.share)."""
    sleeper = "import time\ndef f(x):\n    time.sleep(30)\n    return 0"
    with VerifierPool("code", workers=1, timeout_s=10.0, batch_timeout_s=4.0,
                      mode="forkserver") as p:
        t0 = time.monotonic()
        got = p.verify([_job(sleeper), _honest("after the sleeper")])
        assert time.monotonic() - t0 < 5.0
    assert [v.status for v in got] == [Status.TIMEOUT, Status.PASS], got
    assert "share" in got[0].detail


# ----------------------------------------------------------------------------- throughput
def test_the_pool_says_which_bounds_hold(pool):
    assert pool.containment  # e.g. "cgroup v1 (memory, pids, cpu)"
    if os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup/cpu"):
        assert "cpu" in pool.containment


def test_forkserver_reuses_its_worker_between_jobs():
    """Ready after cleanup, then the next job: the worker is kept (no restart per job)."""
    with VerifierPool("code", workers=1, timeout_s=10.0, mode="forkserver") as p:
        t0 = time.monotonic()
        got = p.verify([_honest(i) for i in range(50)])
        assert all(v.status == Status.PASS for v in got)
        assert p.restarts == 0
        assert time.monotonic() - t0 < 10
