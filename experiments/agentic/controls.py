"""The calc_agent experiment's control, outside the production environment: a calculator
that is off by one (every integer it returns + 1), so a policy that reads the observation
copies a wrong answer. A wrapper of the environment built, selected by
`env.wrap=experiments.agentic.controls:off_by_one` from the repository's root (README.md)."""

from __future__ import annotations

import dataclasses

from rlvr_jax.envs.base import OK


def off_by_one(env, e):
    """The `tools` environment `env`, its integer results shifted by one."""
    observe = env.observe

    def shifted(tool, verdict):
        reply = observe(tool, verdict)
        text = reply.text
        if reply.outcome == OK and 0 < len(text) < 100 and text.lstrip("-").isdigit():
            return dataclasses.replace(reply, text=str(int(text) + 1))
        return reply

    env.observe = shifted
    return env
