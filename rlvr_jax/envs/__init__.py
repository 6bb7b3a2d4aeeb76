"""Environments of multi-turn episodes (host side, no JAX): after each policy turn that ends
on a tool call, an environment reads the turn's text and returns what the policy reads next.
`base.py` is the protocol, `calls.py` the call formats, `tool_env.py` the sandboxed tools."""

from __future__ import annotations

from rlvr_jax.envs.base import Environment, Reply
from rlvr_jax.envs.calls import CALL_FORMATS

__all__ = ["CALL_FORMATS", "Environment", "Reply", "make_environment"]


def make_environment(tools, call_format: str, *, workers: int, timeout_s: float,
                     batch_timeout_s: float, mode: str, result_offset: int = 0,
                     turn_rewards: dict | None = None) -> Environment:
    """The tool environment: `tools` (names in verify/toolbox.py) called in `call_format`,
    each call run in the bubblewrap sandbox by a pool of its own."""
    from rlvr_jax.envs.tool_env import ToolEnvironment

    return ToolEnvironment(list(tools), CALL_FORMATS[call_format], workers=workers,
                           timeout_s=timeout_s, batch_timeout_s=batch_timeout_s, mode=mode,
                           result_offset=result_offset, turn_rewards=turn_rewards)
