"""The kinds of job a pool runs, registered by their plug-ins (graders in rlvr_jax/verify/,
environments' checks in rlvr_jax/envs/): the sandbox package imports none of them by name;
an unknown kind makes it import the modules named by `rlvr_jax.kinds` entry points.

A sandboxed kind is a codec, the host side of its jobs, behind the verdict firewall
(firewall.py): what a job sends into the sandbox (`wire(job)`), what a worker's reply means
(`verdict(job, reply)`) and a reply that says nothing about any candidate
(`neutral_reply(job)`, the firewall's control); an optional `PYTHON` (trainer_python.TrainerPython)
runs its worker with the trainer's interpreter. Every codec function reads
candidate-controlled data, so whatever it raises becomes a verdict: the candidate's, unless
the same call on a neutral answer fails too.

A trusted kind (a grader of our own, e.g. math) runs unsandboxed in plain worker processes,
`python -m MODULE KIND`, where MODULE answers the JSON-lines protocol (verify/worker.py).
No JAX import."""

from __future__ import annotations

import math
from typing import Any, Optional

from rlvr_jax.sandbox import firewall
from rlvr_jax.types import Status, Verdict

_SANDBOXED: dict[str, Any] = {}  # kind -> codec
_TRUSTED: dict[str, str] = {}  # kind -> the worker module that runs it


def register(kind: str, codec: Any) -> None:
    """A sandboxed kind: `codec` has wire, verdict and neutral_reply (see above)."""
    missing = [f for f in ("wire", "verdict", "neutral_reply") if not hasattr(codec, f)]
    if missing:
        raise TypeError(f"codec for kind {kind!r} lacks {missing}")
    _SANDBOXED[kind] = codec


def register_trusted(kinds, worker_module: str) -> None:
    """Trusted kinds, each run by `python -m worker_module KIND`."""
    for kind in kinds:
        _TRUSTED[kind] = worker_module


_discovered = False


def _discover() -> None:
    """Import the modules that register kinds, named by the `rlvr_jax.kinds` entry points
    of installed packages (this one names rlvr_jax.verify: pyproject.toml), once: a pool
    made before any of them was imported still finds its kind, and this package names no
    plug-in itself."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    import importlib
    from importlib import metadata

    for entry in metadata.entry_points(group="rlvr_jax.kinds"):
        importlib.import_module(entry.value.split(":")[0])


def codec(kind: str) -> Optional[Any]:
    """The sandboxed kind's codec, or None for a trusted kind."""
    if kind not in _SANDBOXED and kind not in _TRUSTED:
        _discover()
    return _SANDBOXED.get(kind)


def trusted_worker(kind: str) -> Optional[str]:
    if kind not in _SANDBOXED and kind not in _TRUSTED:
        _discover()
    return _TRUSTED.get(kind)


def known() -> list[str]:
    _discover()
    return sorted(set(_SANDBOXED) | set(_TRUSTED))


def wire(kind: str, job: dict):
    """(what to send the worker, None), or (None, the candidate's verdict) when reading its
    completion raised (e.g. a tool call whose name is not a string)."""
    c = _SANDBOXED.get(kind)
    if c is None:
        return job, None
    return firewall.attempt(lambda: c.wire(job), lambda: c.wire(_neutral(job)),
                            Status.RUNTIME_ERROR, f"{kind} job")


def verdict(kind: str, job: dict, msg: dict) -> Verdict:
    """A worker's reply as a verdict. A sandboxed kind's codec compares the candidate's
    outputs on the host, behind the firewall: a huge returned int or a forged error field of
    another type is the candidate's runtime error, never an exception in the caller."""
    c = _SANDBOXED.get(kind)
    if c is None:  # a trusted grader's worker ran its own firewall (verify/worker.py)
        return firewall.guarded(lambda: Verdict(Status(msg["status"]), str(msg["detail"]),
                                                parts=_parts(msg.get("parts", ()))),
                                None, Status.SANDBOX_ERROR, f"{kind} worker reply")
    return firewall.guarded(lambda: c.verdict(job, msg),
                            lambda: c.verdict(_neutral(job), c.neutral_reply(job)),
                            Status.RUNTIME_ERROR, f"{kind} reply")


def _parts(raw) -> tuple:
    """A grader's named rewards from its reply: ((name, finite float), ...); anything else
    raises (the firewall makes that the reply's sandbox error)."""
    out = tuple((str(k), float(x)) for k, x in raw)
    if not all(math.isfinite(x) for _, x in out):
        raise ValueError(f"a reward part is not finite: {out}")
    return out


def _neutral(job: dict) -> dict:
    """The job with the candidate's part replaced by a neutral one: the firewall's control."""
    return dict(job, completion="")
