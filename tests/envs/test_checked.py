"""envs/checked.py: a user's host-side environment held to the lifecycle's contract."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest

from rlvr_jax.envs import registry
from rlvr_jax.envs.base import OK, Episode, Reply, Stateless
from rlvr_jax.envs.checked import Checked, ContractError
from rlvr_jax.types import Status, Verdict
from tests.test_episodes import ScriptedEnv, _run


class Broken(Stateless):
    """A stateless environment whose answers are changed by `how` (None: sound ones)."""

    stop_texts, tools = ("#",), ("calculator",)
    observation_prefix, observation_suffix = "[", "]"

    def __init__(self, how=None):
        self.how = how

    def respond(self, turns, contexts):
        out = [Reply("4", OK, "calculator", 0.5) for _ in turns]
        fix = {"short": lambda: out[:-1], "none": lambda: None, "text": lambda: "4" * len(out),
               "outcome": lambda: [dataclasses.replace(out[0], outcome="fine")] + out[1:],
               "nan": lambda: [dataclasses.replace(out[0], reward=math.nan)] + out[1:],
               "bytes": lambda: [dataclasses.replace(out[0], text=b"4")] + out[1:],
               "tuple": lambda: [("4", OK)] + out[1:]}
        return fix.get(self.how, lambda: out)()

    def open(self, contexts):
        out = super().open(contexts)
        return out[:-1] if self.how == "open" else out

    def finish(self, episodes, final_texts):
        if self.how == "finish_short":
            return [None] * (len(episodes) - 1)
        if self.how == "finish_nan":
            return [Verdict(Status.WRONG, fraction=math.nan)] * len(episodes)
        if self.how == "finish_status":
            return ["PASS"] * len(episodes)
        return [Verdict(Status.PASS, parts=(("steps", 1.0),))] * len(episodes)


def make_short(e=None):
    return Broken("short")


@pytest.mark.parametrize("how, message", [
    ("short", r"step returned 1 replies for 2"),
    ("none", r"step returned a NoneType, not a list of 2 replies"),
    ("text", r"step returned a str, not a list of 2 replies"),
    ("outcome", r"outcome 'fine'"),
    ("nan", r"reward nan \(a finite number\)"),
    ("bytes", r"text or tool is not a string"),
    ("tuple", r"not a Reply"),
])
def test_a_broken_step_stops_with_one_message_naming_the_key(how, message):
    env = Checked(Broken(how), "env.kind", "my_pkg.envs:make")
    eps = env.open([{}, {}])
    with pytest.raises(ContractError, match=r"^config key 'env.kind': environment "
                                            r"'my_pkg.envs:make': .*" + message):
        env.step(eps, ["1+3", "2+2"])


@pytest.mark.parametrize("how, message", [
    ("open", r"open returned 1 episodes for 2"),
    ("finish_short", r"finish returned 1 verdicts for 2"),
    ("finish_nan", r"not None or a Verdict"),
    ("finish_status", r"finish returned 'PASS'"),
])
def test_a_broken_open_or_finish_stops_with_one_message(how, message):
    env = Checked(Broken(how), "env.wrap", "exp.controls:w")
    with pytest.raises(ContractError, match=message):
        env.finish(env.open([{}, {}]), ["a", "b"])


def test_a_sound_environment_passes_through_unchanged():
    """Answers are the environment's own objects; attributes (and their absence) and a
    wrapper's patches are the environment's."""
    inner = Broken()
    env = Checked(inner, "env.kind", "m:f")
    eps = env.open([{"q": 1}])
    assert isinstance(eps[0], Episode) and eps[0].context == {"q": 1}
    assert env.step(eps, ["x"]) == [Reply("4", OK, "calculator", 0.5)]
    assert env.finish(eps, ["x"])[0].status == Status.PASS
    assert env.tools == ("calculator",) and not hasattr(env, "prepare")
    env.observation_suffix = ">"
    assert inner.observation_suffix == ">" and env.observation_suffix == ">"
    assert copy.copy(env).step(eps, ["x"]) == env.step(eps, ["x"])
    for bad in ({"tools": "calculator"}, {"stop_texts": None}, {"observation_prefix": 1}):
        with pytest.raises(ContractError, match=f"{next(iter(bad))} must be"):
            Checked(type("Bad", (Broken,), bad)(), "env.kind", "m:f")


def test_a_users_factory_is_checked_and_a_short_step_never_passes_silently():
    """Built by name (env.kind=package.module:factory), an environment answering one call
    too few stops the lock-step driver with the message; before, the unanswered episode went
    on with no observation."""
    env = registry.factory("tests.envs.test_checked:make_short")(None)
    assert isinstance(env, Checked)
    with pytest.raises(ContractError, match=r"'env.kind': environment "
                                            r"'tests.envs.test_checked:make_short': step "
                                            r"returned \d+ replies for \d+"):
        _run(env)
    _run(Checked(ScriptedEnv(["4"]), "env.kind", "m:f"))  # a sound one runs as before
