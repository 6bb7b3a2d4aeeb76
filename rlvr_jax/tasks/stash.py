"""A task that needs a world that remembers (env.kind=python_repl): `517**431%83=` -> `44`.

The power has hundreds of digits: no model copies it through text, and no tiny model
computes the remainder in its head. The demonstrated episode keeps it in the session:

    <python>x=517**431</python><r></r><python>x%83</python><r>44</r>44

The first call prints nothing (the value stays in the session's variable `x`); the second
reads it. With a session reset before every call (the stateless control,
experiments/stateful/controls.py) the second call is a NameError and the answer a guess
(about 1 in the modulus). Held-out problems are hash-disjoint from training ones; verified
in process as one exact integer (`verifier=inprocess`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from rlvr_jax.config.choices import _check
from rlvr_jax.tasks.arithmetic import ArithmeticTask
from rlvr_jax.tasks.base import ProceduralSplit
from rlvr_jax.tasks.registry import TaskSpec, register

PRIMES = (53, 59, 61, 67, 71, 73, 79, 83, 89, 97)


@dataclass
class StashTaskConfig:
    """`a**b%p=` with a, b of `digits` digits and p a 2-digit prime (tasks/stash.py): the
    demonstrations store a**b in the Python session, then take its remainder."""

    name: str = "stash"
    digits: int = 3
    heldout_fraction: float = 0.1
    split_seed: int = 0

    def check(self, key: str = "task") -> None:
        _check(2 <= self.digits <= 4, f"{key}.digits", "must be in [2, 4]")
        _check(0.0 < self.heldout_fraction < 1.0, f"{key}.heldout_fraction",
               "must be in (0, 1)")


@dataclass(frozen=True)
class Problem:
    base: int
    exponent: int
    modulus: int

    @property
    def answer(self) -> int:
        return pow(self.base, self.exponent, self.modulus)


@dataclass(frozen=True)
class StashTask(ProceduralSplit[Problem]):
    digits: int = 3
    heldout_fraction: float = 0.1
    split_seed: int = 0

    heldout_salt: ClassVar[int] = 0x57A5

    def key(self, problem: Problem) -> str:
        return self.prompt(problem)

    def draw(self, rng: np.random.Generator, count: int) -> list[Problem]:
        lo, hi = 10 ** (self.digits - 1), 10 ** self.digits
        a, b = rng.integers(lo, hi, size=(2, count)).tolist()
        m = rng.integers(0, len(PRIMES), size=count).tolist()
        return [Problem(x, y, PRIMES[k]) for x, y, k in zip(a, b, m)]

    def prompt(self, problem: Problem) -> str:
        return f"{problem.base}**{problem.exponent}%{problem.modulus}="

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        return count_tokens(self.prompt(Problem(10 ** self.digits - 1, 10 ** self.digits - 1,
                                                97)))

    def demonstration(self, problem: Problem, wrong: bool, rng: np.random.Generator,
                      max_offset: int) -> str:
        if not wrong:
            return str(problem.answer)
        return str((problem.answer + int(rng.integers(1, problem.modulus))) % problem.modulus)

    def tool_demonstration(self, problem: Problem, rng: np.random.Generator) -> dict:
        """Two calls: store the power, then read its remainder (warmstart.py)."""
        return {"calls": [("python", {"code": f"x={problem.base}**{problem.exponent}"}, ""),
                          ("python", {"code": f"x%{problem.modulus}"}, str(problem.answer))],
                "answer": str(problem.answer)}

    # One exact integer, checked as arithmetic's answers are (verifier=inprocess).
    verify_jobs = ArithmeticTask.verify_jobs
    answer_of = staticmethod(ArithmeticTask.answer_of)


def build(t: StashTaskConfig, tokenizer) -> StashTask:
    return StashTask(t.digits, t.heldout_fraction, t.split_seed)


SPEC = register(TaskSpec("stash", StashTaskConfig, build, verifiers=("inprocess",)))
