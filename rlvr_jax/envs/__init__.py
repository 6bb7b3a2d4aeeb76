"""Environments of multi-turn episodes (host side, no JAX): after each policy turn that ends
on a tool call, an environment reads the turn's text and returns what the policy reads next.
`base.py` is the episode lifecycle (open, step, finish, close), `calls.py` the call formats,
`tool_env.py` the stateless sandboxed tools, `session_env.py` stateful environments (a
sandbox session per episode) made from the modules `world.py` reads, `registry.py` the names
`env.kind` takes."""

from __future__ import annotations

from rlvr_jax.envs.base import Environment, Episode, Reply
from rlvr_jax.envs.calls import CALL_FORMATS

__all__ = ["CALL_FORMATS", "Environment", "Episode", "Reply", "make_environment",
           "make_session_environment"]


def make_environment(tools, call_format: str, *, workers: int, timeout_s: float,
                     batch_timeout_s: float, mode: str,
                     turn_rewards: dict | None = None) -> Environment:
    """The tool environment: `tools` (names in verify/toolbox.py) called in `call_format`,
    each call run in the bubblewrap sandbox by a pool of its own."""
    from rlvr_jax.envs.tool_env import ToolEnvironment

    return ToolEnvironment(list(tools), CALL_FORMATS[call_format], workers=workers,
                           timeout_s=timeout_s, batch_timeout_s=batch_timeout_s, mode=mode,
                           turn_rewards=turn_rewards)


def make_session_environment(name: str, call_format: str, *, limits, max_live: int = 256,
                             spares: int = 2, turn_rewards: dict | None = None,
                             check_workers: int = 2, check_timeout_s: float = 30.0,
                             mode: str = "forkserver", max_calls: int = 0,
                             fleet=None) -> Environment:
    """The stateful environment `name` (envs/registry.py), a sandbox session per episode (on
    this host, or with `fleet` on a Ray cluster's actors: sandbox/fleet.py)."""
    from rlvr_jax.envs import registry
    from rlvr_jax.envs.session_env import SessionEnvironment

    return SessionEnvironment(registry.world(name), CALL_FORMATS[call_format], limits=limits,
                              max_live=max_live, spares=spares, turn_rewards=turn_rewards,
                              check_workers=check_workers, check_timeout_s=check_timeout_s,
                              mode=mode, max_calls=max_calls, fleet=fleet)
