"""One interface for every source of verdicts: `submit(jobs) -> Future[list[Verdict]]`,
`verify(jobs) -> list[Verdict]`, `close()`. Built from the config's plain values by
`make_verifier`; the loop never knows which kind it holds."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Optional, Protocol, Sequence

from rlvr_jax.types import Verdict
from rlvr_jax.sandbox import codecs
from rlvr_jax.sandbox.pool import VerifierPool
from rlvr_jax.verify.trusted import CHECKS, TrustedVerifier


class Verifier(Protocol):
    def submit(self, jobs: Sequence[dict]) -> Future: ...

    def verify(self, jobs: Sequence[dict]) -> list[Verdict]: ...

    def close(self) -> None: ...


# Config `verifier.kind` "inprocess" names the trusted integer check (the arithmetic task's);
# "exact", a trusted string match (mixed-source rows).
TRUSTED_KINDS = {"inprocess": "integer", "exact": "exact"}


def fleet_for(backend: str, fleet, run_dir: str, processes: int = 1):
    """The Ray fleet verification runs on (`fleet` with its namespace: the configured one, or
    one named after the run's directory, so a run's actors are its own), or None: local.
    Each of the run's `processes` admits its share of fleet.max_sessions."""
    if str(backend) != "ray":
        return None
    import dataclasses
    import hashlib
    import os

    name = fleet.namespace or "rlvr-" + hashlib.sha1(
        os.path.abspath(run_dir).encode()).hexdigest()[:12]
    return dataclasses.replace(fleet, namespace=name,
                               max_sessions=fleet.max_sessions // max(processes, 1))


def make_verifier(kind: str, *, workers: int, timeout_s: float,
                  batch_timeout_s: Optional[float], mode: Optional[str],
                  kinds: Sequence[str] = (), fleet=None) -> Verifier:
    """A trusted in-process checker for the trusted kinds; `routed`: each job's own kind (made
    on first use, or now for `kinds`); else the worker pool (`mode`: the
    sandboxed kinds' forkserver or fresh, ignored for trusted graders such as math), on this
    host, or with `fleet` (config.FleetConfig, its namespace set) as actors on a Ray cluster
    (sandbox/fleet.py)."""
    if kind in TRUSTED_KINDS:
        return TrustedVerifier(CHECKS[TRUSTED_KINDS[kind]])
    if kind == "routed":  # each job names its kind (verify/routed.py)
        from rlvr_jax.verify.routed import RoutedVerifier

        routed = RoutedVerifier(lambda k: make_verifier(k, workers=workers, timeout_s=timeout_s,
                                                        batch_timeout_s=batch_timeout_s,
                                                        mode=mode, fleet=fleet))
        routed.prepare(kinds)  # the task's kinds now: a missing sandbox fails before any work
        return routed
    mode = mode if codecs.codec(kind) is not None else None
    if fleet is not None:
        from rlvr_jax.sandbox.fleet import RayVerifier

        return RayVerifier(kind, workers=workers, timeout_s=timeout_s,
                           batch_timeout_s=batch_timeout_s, mode=mode, address=fleet.address,
                           namespace=fleet.namespace, actors=fleet.actors,
                           resource=fleet.resource, call_timeout_s=fleet.call_timeout_s,
                           start_timeout_s=fleet.start_timeout_s)
    return VerifierPool(kind, workers=workers, timeout_s=timeout_s,
                        batch_timeout_s=batch_timeout_s, mode=mode)
