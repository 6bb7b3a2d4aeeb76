"""A host-side environment of the user's (`env.kind=package.module:factory`, `env.wrap`)
held to the lifecycle's contract (base.py), so that a bug there stops the run with one
message naming the config key, never a silent wrong record: `step` answering 3 calls of 4
(the drivers pair replies with turns: the fourth episode would go on with no observation),
an outcome no metric knows, a non-finite per-turn reward (it would reach every advantage
of its group), a verdict that is not one. The built-in environments keep the contract by
construction (their tests) and are not wrapped."""

from __future__ import annotations

import math
from numbers import Real
from typing import Sequence

from rlvr_jax.config.choices import ConfigError
from rlvr_jax.envs.base import OUTCOMES, Episode, Reply
from rlvr_jax.types import Status, Verdict

_OWN = ("env", "where")


class ContractError(ConfigError):
    """An environment of the user's broke the lifecycle's contract (the message names it)."""


class Checked:
    """`env` with each lifecycle call's answer checked; everything else is env's own."""

    def __init__(self, env, key: str, name: str):
        object.__setattr__(self, "env", env)
        object.__setattr__(self, "where", f"config key '{key}': environment {name!r}")
        for attr in ("tools", "stop_texts"):
            value = getattr(env, attr, None)
            if isinstance(value, str) or not _strings(value):
                self._fail(f"{attr} must be a sequence of strings, not {value!r}")
        for attr in ("observation_prefix", "observation_suffix"):
            if not isinstance(getattr(env, attr, None), str):
                self._fail(f"{attr} must be a string, not {getattr(env, attr, None)!r}")

    def _fail(self, what: str):
        raise ContractError(f"{self.where}: {what} (rlvr_jax/envs/base.py)")

    def _count(self, call: str, out, n: int, what: str) -> list:
        if isinstance(out, (str, bytes)) or not isinstance(out, Sequence):
            self._fail(f"{call} returned a {type(out).__name__}, not a list of {n} {what}")
        if len(out) != n:
            self._fail(f"{call} returned {len(out)} {what} for {n}")
        return list(out)

    def open(self, contexts):
        out = self._count("open", self.env.open(contexts), len(contexts), "episodes")
        for x in out:
            if not isinstance(x, Episode) or not isinstance(x.failed, str) or not isinstance(
                    x.observation, str):
                self._fail(f"open returned {x!r}, not an Episode (failed and observation "
                           "strings)")
        return out

    def step(self, episodes, turns):
        out = self._count("step", self.env.step(episodes, turns), len(turns), "replies")
        for r in out:
            if not isinstance(r, Reply):
                self._fail(f"step returned {r!r}, not a Reply")
            if r.outcome not in OUTCOMES:
                self._fail(f"step returned outcome {r.outcome!r} (one of {OUTCOMES})")
            if not (isinstance(r.text, str) and isinstance(r.tool, str)):
                self._fail(f"step returned a reply whose text or tool is not a string: {r!r}")
            if not isinstance(r.reward, Real) or not math.isfinite(r.reward):
                self._fail(f"step returned reward {r.reward!r} (a finite number)")
        return out

    def finish(self, episodes, final_texts):
        out = self._count("finish", self.env.finish(episodes, final_texts), len(episodes),
                          "verdicts")
        for v in out:
            if v is not None and not (isinstance(v, Verdict) and _sound(v)):
                self._fail(f"finish returned {v!r}, not None or a Verdict (a Status, a finite "
                           "fraction, (name, finite value) parts)")
        return out

    def __getattr__(self, attr):  # close_episodes, stats, prepare, tools, ...: env's own
        if attr in _OWN:  # not set yet (a copy being made): no recursion through self.env
            raise AttributeError(attr)
        return getattr(self.env, attr)

    def __setattr__(self, attr, value):  # a wrapper's patch reaches the environment
        setattr(self.env, attr, value)


def _strings(value) -> bool:
    try:
        return all(isinstance(x, str) for x in value)
    except TypeError:
        return False


def _sound(v: Verdict) -> bool:
    parts = [p if isinstance(p, (tuple, list)) and len(p) == 2 else ("", None) for p in v.parts]
    numbers = [v.fraction] + [x for _, x in parts]
    return isinstance(v.status, Status) and all(isinstance(n, str) for n, _ in parts) and all(
        isinstance(x, Real) and math.isfinite(x) for x in numbers)
