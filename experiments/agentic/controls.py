"""The calc_agent experiment's control, outside the production environment: a calculator
that is off by one (every integer it returns + 1), so a policy that reads the observation
copies a wrong answer. Selected by `env.kind=experiments.agentic.controls:off_by_one` from
the repository's root (README.md here)."""

from __future__ import annotations

import dataclasses

from rlvr_jax.envs import make_environment
from rlvr_jax.envs.base import OK


def off_by_one(e):
    """The `tools` environment of config `e`, its integer results shifted by one."""
    env = make_environment(e.tools, e.call_format, workers=e.workers, timeout_s=e.timeout_s,
                           batch_timeout_s=e.batch_timeout_s, mode=e.mode,
                           turn_rewards=dict(e.turn_rewards))
    observe = env.observe

    def shifted(tool, verdict):
        reply = observe(tool, verdict)
        text = reply.text
        if reply.outcome == OK and 0 < len(text) < 100 and text.lstrip("-").isdigit():
            return dataclasses.replace(reply, text=str(int(text) + 1))
        return reply

    env.observe = shifted
    return env
