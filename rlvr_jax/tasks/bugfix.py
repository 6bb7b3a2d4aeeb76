"""A bug-fixing task on the `workspace` environment (env.kind=workspace, envs/worlds/workspace.py):
the workspace's solution.py computes the wrong thing; the prompt says what f must compute;
the reward is the task's hidden cases run on the final workspace (in a separate box).

    prompt      fix f(x)=x*7+5
    solution.py def f(x):
                    return x*7+2          (one constant or the operator is wrong)

The buggy line appears nowhere in the prompt: the demonstrated episode reads the file, then
replaces the line's expression (`edit_file` needs the old text exactly, once):

    <read_file>solution.py</read_file><r>def f(x):\\n    return x*7+2\\n</r>
    <edit_file>{"path":"solution.py","old":"x*7+2","new":"x*7+5"}</edit_file>
    <r>edited solution.py</r>done

A visible test (check.py, `run_tests`) is in the workspace too. The hidden cases call f on
values the agent never sees; the verdict is the fraction that return the expected value
(PASS when all do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from rlvr_jax.config.choices import _check
from rlvr_jax.tasks.base import JudgedByItsWorld, ProceduralSplit
from rlvr_jax.tasks.registry import TaskSpec, register

HIDDEN_XS = (-7, -2, 0, 1, 3, 8, 12, 25)
VISIBLE_X = 2


@dataclass
class BugfixTaskConfig:
    """Fix `f(x)=x*a+b` in a seeded solution.py (tasks/bugfix.py), env.kind=workspace."""

    name: str = "bugfix"
    heldout_fraction: float = 0.1
    split_seed: int = 0

    def check(self, key: str = "task") -> None:
        _check(0.0 < self.heldout_fraction < 1.0, f"{key}.heldout_fraction",
               "must be in (0, 1)")


@dataclass(frozen=True)
class Problem:
    mul: int
    op: str  # "+" | "-"
    add: int
    bug: tuple  # (mul, op, add) as the file has it: one of them differs

    @staticmethod
    def expression(mul: int, op: str, add: int) -> str:
        return f"x*{mul}{op}{add}"

    @property
    def right(self) -> str:
        return self.expression(self.mul, self.op, self.add)

    @property
    def wrong(self) -> str:
        return self.expression(*self.bug)

    def value(self, x: int) -> int:
        return x * self.mul + (self.add if self.op == "+" else -self.add)

    def file(self, expression: str) -> str:
        return f"def f(x):\n    return {expression}\n"


@dataclass(frozen=True)
class BugfixTask(JudgedByItsWorld, ProceduralSplit[Problem]):
    heldout_fraction: float = 0.1
    split_seed: int = 0

    heldout_salt: ClassVar[int] = 0xB06F

    def key(self, problem: Problem) -> str:
        return f"{problem.right}|{problem.wrong}"

    def draw(self, rng: np.random.Generator, count: int) -> list[Problem]:
        out = []
        for _ in range(count):
            mul, add = int(rng.integers(2, 10)), int(rng.integers(1, 10))
            op = "+-"[int(rng.integers(2))]
            bug = [mul, op, add]
            where = int(rng.integers(3))
            if where == 1:
                bug[1] = "-" if op == "+" else "+"
            else:  # another digit in the same place
                others = [d for d in (range(2, 10) if where == 0 else range(1, 10))
                          if d != bug[where]]
                bug[where] = others[int(rng.integers(len(others)))]
            out.append(Problem(mul, op, add, tuple(bug)))
        return out

    def prompt(self, problem: Problem) -> str:
        return f"fix f(x)={problem.right}\n"

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        return count_tokens("fix f(x)=x*9+9\n")

    def tool_context(self, problem: Problem) -> dict:
        visible = (f"from solution import f\nassert f({VISIBLE_X}) == {problem.value(VISIBLE_X)}"
                   ", f(2)\nprint('ok')\n")
        return {"setup": {"files": {"solution.py": problem.file(problem.wrong),
                                    "check.py": visible},
                          "visible_tests": "check.py"},
                "goal": {"module": "solution.py", "function": "f",
                         "cases": [[[x], problem.value(x)] for x in HIDDEN_XS]}}

    def demonstration(self, problem: Problem, wrong: bool, rng: np.random.Generator,
                      max_offset: int) -> str:
        """An answer without acting (the file is unchanged: WRONG whatever it says)."""
        return "done"

    def tool_demonstration(self, problem: Problem, rng: np.random.Generator) -> dict:
        """Read the file, then edit its line: two calls (warmstart.py)."""
        return {"calls": [("read_file", {"path": "solution.py"}, problem.file(problem.wrong)),
                          ("edit_file", {"path": "solution.py", "old": problem.wrong,
                                         "new": problem.right}, "edited solution.py")],
                "answer": "done"}


def build(t: BugfixTaskConfig, tokenizer) -> BugfixTask:
    return BugfixTask(t.heldout_fraction, t.split_seed)


SPEC = register(TaskSpec("bugfix", BugfixTaskConfig, build, verifiers=("inprocess",),
                         environment="workspace"))
