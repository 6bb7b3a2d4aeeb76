"""What every environment does with a turn that ended on a call, before it runs: read it in
the call format and validate it against the tools' schemas, behind the verdict firewall (a
turn is candidate data); and the per-turn rewards by call outcome, after."""

from __future__ import annotations

import dataclasses
from typing import Optional

from rlvr_jax.envs.base import MALFORMED, SANDBOX_ERROR, UNKNOWN_TOOL, Reply
from rlvr_jax.envs.calls import CallFormat
from rlvr_jax.sandbox import firewall
from rlvr_jax.types import Status
from rlvr_jax.verify.toolbox import check_call


def read(call_format: CallFormat, turn: str, tools: tuple[str, ...],
         schemas: Optional[dict] = None):
    """(tool, arguments) for a valid call, else the Reply the policy reads (never raises)."""
    def attempt(text):
        parsed = call_format.parse(text, list(tools), schemas)
        if isinstance(parsed, str):
            return Reply(f"error: {parsed}", MALFORMED)
        tool, arguments = parsed
        problem = check_call(tool, arguments, list(tools), schemas)
        if problem:
            known = isinstance(tool, str) and tool in tools
            return Reply(f"error: {problem}", MALFORMED if known else UNKNOWN_TOOL,
                         tool if known else "")
        return tool, arguments

    got, failed = firewall.attempt(lambda: attempt(turn), lambda: attempt(""),
                                   Status.RUNTIME_ERROR, "tool call")
    if failed is None:
        return got
    return (Reply("", SANDBOX_ERROR) if failed.status == Status.SANDBOX_ERROR  # our bug
            else Reply("error: the call could not be read", MALFORMED))


def rewarded(replies: list, turn_rewards: dict) -> list:
    """Each reply with its per-turn reward by outcome (none for a sandbox error: masked)."""
    return [r if r.outcome == SANDBOX_ERROR else
            dataclasses.replace(r, reward=float(turn_rewards.get(r.outcome, 0.0)))
            for r in replies]
