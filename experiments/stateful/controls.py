"""Controls of the stateful-environment experiments (README.md here), wrappers outside the
production environments, selected with `env.wrap=experiments.stateful.controls:NAME` from
the repository's root."""

from __future__ import annotations

import dataclasses

from rlvr_jax.envs.base import OK


def reset_each_call(env, e):
    """The same tools, with the episode's session replaced by a fresh one (the same setup)
    before every call: nothing an earlier call did is there (the stateless control)."""
    step = env.step

    def fresh(episodes, turns):
        env.close_episodes(episodes)
        for ep, new in zip(episodes, env.open([ep.context for ep in episodes])):
            ep.handle, ep.failed, ep.closed = new.handle, new.failed, False
        return step(episodes, turns)

    env.step = fresh
    return env


def drop_writes(env, e):
    """The same API, with every call that would change the database answered as if it had
    succeeded but never run (reads run): the agent's writes are silently lost."""
    step = env.step
    writes = {"restock", "sell", "set_price"}

    def dropped(episodes, turns):
        replies = [None] * len(turns)
        reads = []
        for i, turn in enumerate(turns):
            parsed = env.format.parse(turn, list(env.tools), env.world.schemas)
            if isinstance(parsed, tuple) and parsed[0] in writes:
                replies[i] = dataclasses.replace(
                    env.observe(parsed[0], {"status": "ok", "value": {"ok": True}}), outcome=OK)
            else:
                reads.append(i)
        for i, r in zip(reads, step([episodes[i] for i in reads], [turns[i] for i in reads])):
            replies[i] = r
        return replies

    env.step = dropped
    return env
