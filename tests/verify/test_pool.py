"""The worker pool: hung workers killed, dead ones retried then reported, garbled replies."""

import time

from rlvr_jax.types import Status
from rlvr_jax.sandbox.pool import VerifierPool


def test_pool_kills_hung_workers_retries_dead_ones_and_keeps_answering():
    with VerifierPool("test_sleep", workers=2, timeout_s=3.0) as pool:
        t0 = time.monotonic()
        got = pool.verify([{"seconds": 0.05}, {"seconds": 30}, {"die": True}, {"seconds": 0.1}])
        # The call returns by the hung job's deadline plus the respawns of the dead workers,
        # not after the 30 s sleep.
        assert time.monotonic() - t0 < 3.0 + 5.0
        assert [v.status for v in got] == [Status.PASS, Status.TIMEOUT, Status.SANDBOX_ERROR,
                                           Status.PASS]
        assert "died twice" in got[2].detail  # retried once on a fresh worker first
        assert pool.restarts == 3  # one kill for the hang, two for the deaths
        again = pool.verify([{"seconds": 0.01, "i": i} for i in range(6)])
        assert all(v.status == Status.PASS for v in again)
        fut = pool.submit([{"seconds": 0.01}])
        assert fut.result(timeout=10)[0].status == Status.PASS
        # From several threads at once (a stream's environment threads): each its own
        # verdicts (interleaved batches once mixed their workers' lines and clocks).
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4) as threads:
            got = list(threads.map(lambda k: pool.verify(
                [{"seconds": 0.01, "i": 10 * k + j} for j in range(3)] + [{"die": True, "i": k}]),
                range(4)))
        assert [[v.status for v in g] for g in got] == [[Status.PASS] * 3 + [
            Status.SANDBOX_ERROR]] * 4
        # A reply that is not a verdict: the worker is replaced, the job retried, then masked.
        garbled = pool.verify([{"garble": True}, {"seconds": 0.01, "i": 7}])
        assert [v.status for v in garbled] == [Status.SANDBOX_ERROR, Status.PASS]
        assert "malformed reply twice" in garbled[0].detail
        assert pool.restarts == 5 + 8  # (and the threads' four deaths, each retried once)
    with VerifierPool("test_sleep", workers=1, timeout_s=5.0, batch_timeout_s=1.0) as pool:
        pool.verify([{"seconds": 0.0, "warm": 1}])  # started: the batch below runs at once
        t0 = time.monotonic()
        got = pool.verify([{"seconds": 3}, {"seconds": 0.01}])
        assert time.monotonic() - t0 < 2.5
        # The first used more than its share of the batch's time (0.5 s): its own timeout.
        # The second runs after the worker's restart, or, if the restart took the rest of the
        # batch's time, never starts or is cut at the batch's deadline before its own: masked
        # (no verdict on it), never a scored timeout.
        assert got[0].status == Status.TIMEOUT and "share" in got[0].detail
        assert got[1].status == Status.PASS or (
            got[1].status == Status.SANDBOX_ERROR
            and ("not started" in got[1].detail or "batch deadline" in got[1].detail)), got[1]
    with VerifierPool("test_slow_start", workers=1, timeout_s=5.0, batch_timeout_s=0.5) as pool:
        got = pool.verify([{"seconds": 0.01}, {"seconds": 0.01, "i": 1}])
        # The worker starts after the batch's deadline (2 s): capacity, both masked.
        assert [v.status for v in got] == [Status.SANDBOX_ERROR] * 2
        assert all("not started" in v.detail for v in got)


def test_a_slow_worker_start_is_not_the_jobs_timeout():
    """A job's deadline runs from its send to a started worker: a worker that takes 2 s to
    start (a loaded machine) does not turn a 0.05 s job into a TIMEOUT under a 1 s deadline."""
    with VerifierPool("test_slow_start", workers=1, timeout_s=1.0) as pool:
        got = pool.verify([{"seconds": 0.05}, {"seconds": 0.05, "i": 1}])
        assert [v.status for v in got] == [Status.PASS, Status.PASS]
        assert all(v.latency_s < 1.0 for v in got)


def test_workers_that_never_start_are_a_sandbox_error_not_a_hang():
    with VerifierPool("test_no_start", workers=2, timeout_s=1.0, start_timeout_s=5.0) as pool:
        t0 = time.monotonic()
        got = pool.verify([{"seconds": 0.01}, {"seconds": 0.01, "i": 1}])
        assert time.monotonic() - t0 < 30
        assert [v.status for v in got] == [Status.SANDBOX_ERROR] * 2
        assert "failed to start" in got[0].detail and "exit code 3" in got[0].detail


def test_a_jobs_share_of_the_batch():
    """pool.share: its own deadline, or its fair part of what is left of the batch (time
    left x workers / jobs unfinished, at most the time left), never below MIN_SHARE_S."""
    from rlvr_jax.sandbox.pool import MIN_SHARE_S, share

    assert share(10.0, 300.0, 2, 8) == 10.0  # plenty: its own deadline
    assert share(10.0, 8.0, 2, 8) == 2.0  # 8 s x 2 workers / 8 jobs
    assert share(10.0, 3.0, 4, 2) == 3.0  # fewer jobs than workers: the time left
    assert share(10.0, 0.0, 2, 5) == MIN_SHARE_S  # the batch's deadline cuts it (masked)
    assert share(0.05, 0.0, 2, 5) == 0.05
