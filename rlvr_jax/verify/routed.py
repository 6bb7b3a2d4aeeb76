"""Mixed sources in one batch (`verifier.kind=routed`): each job names its own verifier kind
(`job["kind"]`: math, code, reasoning_gym, exact, inprocess) and goes to that kind's verifier,
made on first use and kept for the run; the verdicts come back in the jobs' order. Behind the
same `submit(jobs) -> Future[list[Verdict]]` as every verifier, so the loop does not change.

The kinds of a batch run concurrently (each verifier's own workers); a job's kind is decided
by the task when the data is loaded (a row whose source has no verifier is a bad row there),
so an unknown kind here is our bug and raises.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from concurrent.futures import Future
from typing import Callable, Sequence

from rlvr_jax.types import Verdict

KINDS = ("math", "code", "reasoning_gym", "exact", "inprocess")


class RoutedVerifier:
    def __init__(self, make: Callable[[str], object]):
        """`make(kind)` -> that kind's verifier (verifiers.make_verifier's settings bound)."""
        self._make = make
        self._verifiers: dict = {}
        self._lock = threading.Lock()

    def _verifier(self, kind: str):
        if kind not in KINDS:
            raise ValueError(f"a job of unknown verifier kind {kind!r} (known: {KINDS})")
        with self._lock:
            if kind not in self._verifiers:
                self._verifiers[kind] = self._make(kind)
            return self._verifiers[kind]

    def prepare(self, kinds: Sequence[str]) -> None:
        """Make these kinds' verifiers now (their errors, e.g. no sandbox, before any work)."""
        for kind in kinds:
            self._verifier(kind)

    def submit(self, jobs: Sequence[dict]) -> Future:
        by_kind: dict[str, list[int]] = defaultdict(list)
        for i, job in enumerate(jobs):
            by_kind[job["kind"]].append(i)
        parts = [(idx, self._verifier(kind).submit(
            [{k: v for k, v in jobs[i].items() if k != "kind"} for i in idx]))
            for kind, idx in by_kind.items()]
        done: Future = Future()
        if not parts:
            done.set_result([])
            return done
        left = [len(parts)]
        lock = threading.Lock()

        def finish(_):
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            try:
                out: list = [None] * len(jobs)
                for idx, part in parts:
                    for i, v in zip(idx, part.result()):
                        out[i] = v
                done.set_result(out)
            except BaseException as e:  # a verifier's own failure: the caller sees it
                done.set_exception(e)

        for _, part in parts:
            part.add_done_callback(finish)
        return done

    def verify(self, jobs: Sequence[dict]) -> list[Verdict]:
        return self.submit(jobs).result()

    def close(self) -> None:
        for v in self._verifiers.values():
            v.close()
        self._verifiers = {}
