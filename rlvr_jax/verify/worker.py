"""A verifier worker: `python -m rlvr_jax.verify.worker KIND`.

Says `{"ready": 1}` once started, then reads one JSON job per line on stdin, writes one JSON verdict per line on stdout
(`{"status": int, "detail": str, "latency_s": float}`), until stdin closes. Anything the check
itself prints goes to stderr, so it cannot forge a verdict line. The pool (rlvr_jax/sandbox/pool.py) owns the
deadlines: it kills a worker that does not answer in time.

Each check runs behind the verdict firewall (rlvr_jax/sandbox/firewall.py): a grader that raises on a
pathological answer (a RecursionError on 3000 nested negations, a MemoryError) gives that
answer's verdict, WRONG with the exception named; only a failure that a neutral answer
reproduces is a SANDBOX_ERROR. The process's address space is capped (`MEMORY_MB`), so a
grader cannot take the trainer's machine down with it."""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from rlvr_jax.types import Status, Verdict
from rlvr_jax.sandbox import firewall

MEMORY_MB = 4096  # address space of a grader process (sympy and math-verify use ~0.5 GB)


def _math(job: dict) -> Verdict:
    from rlvr_jax.verify import math as math_check

    return math_check.check(str(job["gold"]), str(job["completion"]))


def _sleep(job: dict) -> Verdict:
    """For tests of the pool itself: sleeps, or dies, as told (or, see `main`, garbles its
    reply)."""
    if job.get("die"):
        os._exit(3)
    time.sleep(float(job.get("seconds", 0.0)))
    return Verdict(Status.PASS, "slept")


def _logic(job: dict) -> Verdict:
    from rlvr_jax.verify import logic

    return logic.check(job)


def _retrieval(job: dict) -> Verdict:
    from rlvr_jax.verify import retrieval

    return retrieval.check(job)


KINDS = {"math": _math, "logic": _logic, "retrieval": _retrieval, "test_sleep": _sleep,
         "test_slow_start": _sleep, "test_no_start": _sleep}


def checked(kind: str, job: dict) -> Verdict:
    """The kind's check behind the firewall; its control is the same job with an empty
    completion."""
    check = KINDS[kind]
    return firewall.guarded(lambda: check(job), lambda: check(dict(job, completion="")),
                            Status.WRONG, f"{kind} check")


def main(kind: str) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_MB << 20, MEMORY_MB << 20))
    if kind == "math":  # pay math-verify's import (about 1.5 s) at start, not on a deadline
        from math_verify import parse

        parse("1")
    if kind == "test_no_start":  # tests of the pool itself
        sys.exit(3)
    if kind == "test_slow_start":
        time.sleep(2.0)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the check's own prints go to stderr
    sys.stdout = sys.stderr
    out.write('{"ready": 1}\n')  # started: the pool's job deadlines count from here
    for line in sys.stdin:
        t0 = time.perf_counter()
        job_id = None
        try:
            job = json.loads(line)
            job_id = job.pop("id", None)  # echoed: the pool matches replies to jobs by id
            if kind == "test_sleep" and job.get("garble"):  # tests of the pool itself
                out.write("not a verdict\n")
                continue
            v = checked(kind, job)
        except Exception as e:  # a job that is no JSON object: the host's bug, not an answer's
            v = Verdict(Status.SANDBOX_ERROR, f"bad job: {firewall.describe(e)}")
        reply = {"status": int(v.status), "detail": v.detail, "id": job_id,
                 "latency_s": time.perf_counter() - t0}
        if v.parts:  # a task's named rewards (Verdict.parts)
            reply["parts"] = [[str(k), float(x)] for k, x in v.parts]
        out.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
