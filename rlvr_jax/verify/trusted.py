"""Trusted checkers that run in the trainer's process, behind the same `submit(jobs)` as the
worker pool: for checks that execute no candidate code and cannot hang (an integer compared with
the ground truth). Anything that runs or parses untrusted programs goes to the pool instead.
Each check runs behind the verdict firewall (rlvr_jax/sandbox/firewall.py): nothing a completion says can raise
into the trainer."""

from __future__ import annotations

import re
import time
from concurrent.futures import Future
from typing import Callable, Sequence

from rlvr_jax.types import Status, Verdict
from rlvr_jax.sandbox import firewall

_INT = re.compile(r"\s*(-?\d+)\s*")
MAX_DIGITS = 4000  # under Python's int-from-string limit (4300 digits), far over any answer


def check_integer(job: dict) -> Verdict:
    """`job = {"completion": str, "answer": int}`: the completion must be exactly one integer
    (surrounding whitespace allowed). Anything else is UNPARSEABLE rather than WRONG, so the
    logs tell format failures from arithmetic failures."""
    completion, answer = job["completion"], int(job["answer"])
    m = _INT.fullmatch(completion)
    if m is None:
        return Verdict(Status.UNPARSEABLE, f"not an integer: {completion[:40]!r}")
    if len(m.group(1)) > MAX_DIGITS:
        return Verdict(Status.WRONG, f"an integer of {len(m.group(1))} digits")
    got = int(m.group(1))
    if got == answer:
        return Verdict(Status.PASS)
    return Verdict(Status.WRONG, f"expected {answer}, got {got}")


def answer_in_tag(completion: str) -> str | None:
    """The content of the last <answer>...</answer> (reasoning-gym's convention), stripped;
    found with two reverse scans: linear in the completion, whatever it holds."""
    end = completion.rfind("</answer>")
    start = completion.rfind("<answer>", 0, end) if end >= 0 else -1
    return completion[start + len("<answer>"):end].strip() if start >= 0 else None


def check_exact(job: dict) -> Verdict:
    """`job = {"completion": str, "answer": str}`: the answer (the last <answer>...</answer>
    of the completion, else after its last '####', else the whole completion) equals the
    reference after trimming and collapsing whitespace."""
    completion = job["completion"]
    got = answer_in_tag(completion)
    if got is not None:
        pass
    elif "####" in completion:
        got = completion.rsplit("####", 1)[1]
    else:
        got = completion
    norm = lambda text: " ".join(str(text).split())
    if not norm(got):
        return Verdict(Status.UNPARSEABLE, "no answer")
    if norm(got) == norm(job["answer"]):
        return Verdict(Status.PASS)
    return Verdict(Status.WRONG, f"expected {norm(job['answer'])[:40]!r}, got {norm(got)[:40]!r}")


CHECKS: dict[str, Callable[[dict], Verdict]] = {"integer": check_integer, "exact": check_exact}


class TrustedVerifier:
    """`submit(jobs) -> Future[list[Verdict]]` (already done), `verify(jobs)`, `close()`."""

    def __init__(self, check: Callable[[dict], Verdict]):
        self._check = check

    def verify(self, jobs: Sequence[dict]) -> list[Verdict]:
        out = []
        for job in jobs:
            t0 = time.perf_counter()
            v = firewall.guarded(lambda: self._check(job),
                                 lambda: self._check(dict(job, completion="")),
                                 Status.WRONG, "trusted check")
            out.append(Verdict(v.status, v.detail, time.perf_counter() - t0, v.fraction))
        return out

    def submit(self, jobs: Sequence[dict]) -> Future:
        done: Future = Future()
        done.set_result(self.verify(jobs))
        return done

    def close(self) -> None:
        pass
