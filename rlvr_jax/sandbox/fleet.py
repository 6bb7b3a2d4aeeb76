"""Verification on a Ray cluster of CPU machines (issue 41; `verifier.backend=ray`, the
`.[ray]` extra). Each actor owns a `VerifierPool` exactly as a trainer host does (the same
bubblewrap containment, verdicts and firewall) and is placed on a machine that declares the
fleet's resource (`ray start --resources='{"sandbox": N}'`). A batch is split into one
contiguous slice per actor, in order, so the verdicts are the local pool's for the same jobs.

A lost actor (its machine gone, its process killed, no reply within `call_timeout_s`) makes
its slice's verdicts SANDBOX_ERROR (masked out of the loss and of the group baseline, never
scored) and is replaced by a new actor wherever the cluster has the resource; the next batch
runs on it. The actors live in the run's namespace and are killed by `close` (and, with the
driver, when the trainer's Ray connection ends: they are not detached).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional, Sequence

from rlvr_jax.types import Status, Verdict


def _ray():
    try:
        import ray
    except ImportError as e:  # config validation says it first; a direct use says it here
        raise ImportError("verifier.backend=ray needs the Ray extra: pip install -e '.[ray]'"
                          ) from e
    return ray


class PoolActor:
    """One sandbox pool on a fleet machine (a Ray actor: `ray.remote(PoolActor)`)."""

    def __init__(self, kind: str, workers: int, timeout_s: float,
                 batch_timeout_s: Optional[float], mode: Optional[str]):
        from rlvr_jax.sandbox.pool import VerifierPool
        from rlvr_jax.verify import verifiers  # noqa: F401 (registers the graders' kinds)

        self.pool = VerifierPool(kind, workers=workers, timeout_s=timeout_s,
                                 batch_timeout_s=batch_timeout_s, mode=mode)

    def verify(self, jobs: list) -> list:
        return self.pool.verify(jobs)

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.pool.close()


class RayVerifier:
    """`submit` / `verify` / `close` (verify/verifiers.py's interface) over `actors` pool
    actors on a Ray cluster."""

    def __init__(self, kind: str, *, workers: int, timeout_s: float,
                 batch_timeout_s: Optional[float], mode: Optional[str], address: str,
                 namespace: str, actors: int, resource: str, call_timeout_s: float):
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=address, namespace=namespace or None, log_to_driver=False,
                     configure_logging=False)
        self._args = (kind, workers, timeout_s, batch_timeout_s, mode)
        # Spread over the machines: a lost machine takes as few slices as it can.
        self._remote = ray.remote(num_cpus=0, resources={resource: 1}, max_restarts=0,
                                  scheduling_strategy="SPREAD")(PoolActor)
        self.call_timeout_s = call_timeout_s
        self.actors = [self._new() for _ in range(actors)]
        self.lost = 0  # actors replaced so far
        self._executor = ThreadPoolExecutor(1)

    def _new(self):
        return self._remote.remote(*self._args)

    def verify(self, jobs: Sequence[dict]) -> list[Verdict]:
        """One verdict per job, in order: actor k verifies the k-th contiguous slice."""
        ray = _ray()
        jobs = list(jobs)
        n, k = len(jobs), len(self.actors)
        bounds = [(i * n // k, (i + 1) * n // k) for i in range(k)]
        refs = [a.verify.remote(jobs[lo:hi]) if hi > lo else None
                for a, (lo, hi) in zip(self.actors, bounds)]
        out: list[Verdict] = []
        for i, (ref, (lo, hi)) in enumerate(zip(refs, bounds)):
            if ref is None:
                continue
            try:
                out += ray.get(ref, timeout=self.call_timeout_s)
            except Exception as e:  # noqa: BLE001 (an actor lost or late: infrastructure)
                why = f"the verifier's Ray actor was lost: {type(e).__name__}"
                out += [Verdict(Status.SANDBOX_ERROR, why)] * (hi - lo)
                self._replace(i)
        return out

    def _replace(self, i: int) -> None:
        ray = _ray()
        try:
            ray.kill(self.actors[i], no_restart=True)
        except Exception:  # noqa: BLE001 (already gone)
            pass
        self.actors[i] = self._new()
        self.lost += 1

    def submit(self, jobs: Sequence[dict]) -> Future:
        return self._executor.submit(self.verify, list(jobs))

    def close(self) -> None:
        ray = _ray()
        self._executor.shutdown(wait=True)
        for a in self.actors:
            try:
                ray.get(a.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 (a lost actor has nothing to close)
                pass
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        self.actors = []
