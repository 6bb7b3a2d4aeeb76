"""The host side of the sandboxed kinds, behind the verdict firewall (firewall.py): what a
job sends into the sandbox (`wire`) and what a worker's reply means (`verdict`). Every
function here reads candidate-controlled data, so whatever it raises becomes a verdict: the
candidate's, unless the same call on a neutral answer fails too. No JAX import."""

from __future__ import annotations

from rlvr_jax.types import Status, Verdict
from rlvr_jax.verify import code as code_check
from rlvr_jax.verify import firewall, gym_score
from rlvr_jax.verify import sql as sql_check
from rlvr_jax.verify import tool_run
from rlvr_jax.verify import tools as tools_check

# kind -> module with wire(job), verdict(job, reply) and neutral_reply(job); a module's
# PYTHON (sandbox.TrainerPython) runs its worker with the trainer's interpreter.
SANDBOXED = {"code": code_check, "sql": sql_check, "tool": tools_check, "tool_run": tool_run,
             "reasoning_gym": gym_score}


def wire(kind: str, job: dict):
    """(what to send the worker, None), or (None, the candidate's verdict) when reading its
    completion raised (e.g. a tool call whose name is not a string)."""
    codec = SANDBOXED.get(kind)
    if codec is None:
        return job, None
    return firewall.attempt(lambda: codec.wire(job), lambda: codec.wire(_neutral(job)),
                            Status.RUNTIME_ERROR, f"{kind} job")


def verdict(kind: str, job: dict, msg: dict) -> Verdict:
    """A worker's reply as a verdict. A sandboxed kind's codec compares the candidate's
    outputs on the host, behind the firewall: a huge returned int or a forged error field of
    another type is the candidate's runtime error, never an exception in the caller."""
    codec = SANDBOXED.get(kind)
    if codec is None:  # a trusted grader's worker ran its own firewall (worker.py)
        return firewall.guarded(lambda: Verdict(Status(msg["status"]), str(msg["detail"])),
                                None, Status.SANDBOX_ERROR, f"{kind} worker reply")
    return firewall.guarded(lambda: codec.verdict(job, msg),
                            lambda: codec.verdict(_neutral(job), codec.neutral_reply(job)),
                            Status.RUNTIME_ERROR, f"{kind} reply")


def _neutral(job: dict) -> dict:
    """The job with the candidate's part replaced by a neutral one: the firewall's control."""
    return dict(job, completion="")
