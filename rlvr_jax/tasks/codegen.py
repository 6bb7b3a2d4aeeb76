"""Procedural code generation: write the Python function a short spec describes.

Prompt `x*3+37=` -> response `def f(x):return x*3+37`. The response is executed in the
sandbox (code verifier) on fixed test inputs; expected outputs are computed here, on the host,
and never enter the sandbox. Warm-start demonstrations are wrong (an off-by-k constant) with a
configurable probability, as in the arithmetic task, so RL has something to remove. Splits are
hash-disjoint: a spec is either for training or held out, never both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np

from rlvr_jax.config.choices import _check
from rlvr_jax.tasks.base import Job, ProceduralSplit, check_pairs
from rlvr_jax.tasks.registry import TaskSpec, register


@dataclass
class CodegenTaskConfig:
    """Procedural code generation (tasks/codegen.py), run in the sandbox (`verifier=code`)."""

    name: str = "codegen"
    heldout_fraction: float = 0.1
    split_seed: int = 0

    def check(self, key: str = "task") -> None:
        _check(0.0 < self.heldout_fraction < 1.0, f"{key}.heldout_fraction", "must be in (0, 1)")

INPUTS = (0, 1, 5, -3, 12)


@dataclass(frozen=True)
class Spec:
    mul_or_add: str  # "*" or "+"
    a: int  # 1..9
    sign: str  # "+" or "-"
    b: int  # 0..99

    @property
    def text(self) -> str:
        return f"x{self.mul_or_add}{self.a}{self.sign}{self.b}"

    def __call__(self, x: int) -> int:
        y = x * self.a if self.mul_or_add == "*" else x + self.a
        return y + self.b if self.sign == "+" else y - self.b


@dataclass(frozen=True)
class CodegenTask(ProceduralSplit[Spec]):
    heldout_fraction: float = 0.1
    split_seed: int = 0

    heldout_salt: ClassVar[int] = 0xC0DE

    def key(self, spec: Spec) -> str:
        return spec.text

    def draw(self, rng: np.random.Generator, count: int) -> list[Spec]:
        m = rng.integers(0, 2, count)
        a = rng.integers(1, 10, count)
        s = rng.integers(0, 2, count)
        b = rng.integers(0, 100, count)
        return [Spec("*+"[i], int(x), "+-"[j], int(y)) for i, x, j, y in zip(m, a, s, b)]

    def prompt(self, spec: Spec) -> str:
        return f"{spec.text}="

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        return count_tokens("x*9-99=")  # the widest spec

    def demonstration(self, spec: Spec, wrong: bool, rng, max_offset: int) -> str:
        b = spec.b
        if wrong:
            b = abs(b + int(rng.integers(1, max_offset + 1)) * (1 if rng.random() < 0.5 else -1))
        return f"def f(x):return x{spec.mul_or_add}{spec.a}{spec.sign}{b}"

    def tool_demonstration(self, spec: Spec, rng: np.random.Generator):
        """A warm-start episode with the `run_tests` tool: a first attempt (half of the time
        off by 1..5 in its constant), the tool's report on the visible tests, then the right
        program."""
        right = self.demonstration(spec, False, rng, 0)
        attempt = self.demonstration(spec, bool(rng.random() < 0.5), rng, 5)
        ctx = self.tool_context(spec)
        report = f"passed {len(ctx['_inputs'])} visible tests"
        scope: dict = {}
        exec(attempt, scope)  # our own demonstration's program, never a model's
        for (x,), want in zip(ctx["_inputs"], ctx["_expected"]):
            if scope["f"](x) != want:
                report = f"failed: f({x!r}) returned {scope['f'](x)!r}, expected {want!r}"
                break
        return "run_tests", {"code": attempt}, report, right

    def tool_context(self, spec: Spec) -> dict:
        """The visible tests the `run_tests` tool runs (the first two inputs; the verifier
        checks all of them)."""
        visible = INPUTS[:2]
        return {"_entry_point": "f", "_inputs": [[x] for x in visible],
                "_expected": [spec(x) for x in visible]}

    @staticmethod
    def answer_of(completion: str) -> str | None:
        return completion.strip() or None

    @staticmethod
    def verify_jobs(specs: Sequence[Spec], completions: Sequence[str]) -> list[Job]:
        check_pairs(specs, completions)
        return [{"completion": c, "entry_point": "f", "inputs": [[x] for x in INPUTS],
                 "expected": [s(x) for x in INPUTS]} for s, c in zip(specs, completions)]


SPEC = register(TaskSpec(
    "codegen", CodegenTaskConfig,
    lambda t, tokenizer: CodegenTask(t.heldout_fraction, t.split_seed), verifiers=("code",)))
