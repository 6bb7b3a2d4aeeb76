"""Procedural arithmetic: `37+5-12=` -> `30`.

Problems are expressions of `min_operands..max_operands` operands with `operand_digits` digits,
joined by the configured operators and evaluated with the usual precedence (`*` before `+`/`-`).

Splits are disjoint by construction: an expression belongs to the held-out split iff a salted
hash of its text falls below `heldout_fraction`, so no training batch can ever contain a held-out
expression, whatever the seed or step. The training stream is a pure function of
(seed, batch index): resuming at batch k reproduces exactly the problems a run without the
restart would have seen.

Verification is trusted and in-process (`verify/trusted.py: check_integer`): the completion
must be exactly one integer, else UNPARSEABLE.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, ClassVar, List, Sequence

import numpy as np

from rlvr_jax.config.choices import _check
from rlvr_jax.tasks.base import Job, ProceduralSplit, check_pairs
from rlvr_jax.tasks.registry import TaskSpec, register


@dataclass
class ArithmeticTaskConfig:
    """Procedural `a op b op c ...`, evaluated with the usual precedence (tasks/arithmetic.py);
    checked in process by the exact-integer verifier (`verifier=inprocess`)."""

    name: str = "arithmetic"
    operators: List[str] = field(default_factory=lambda: ["+"])
    operand_digits: int = 2  # operands are uniform in [0, 10**operand_digits)
    min_operands: int = 2
    max_operands: int = 2  # > 2 gives multi-step expressions
    heldout_fraction: float = 0.1  # share of all expressions reserved for evaluation
    split_seed: int = 0  # salts the hash that assigns an expression to train or held-out
    prompt_template: str = "{question}="
    zero_pad_operands: bool = True  # "07+88": digits at fixed positions, learned much faster

    def check(self, key: str = "task") -> None:
        _check(len(self.operators) > 0 and set(self.operators) <= {"+", "-", "*"},
               f"{key}.operators",
               f"must be a non-empty subset of ['+', '-', '*'], got {list(self.operators)}")
        _check(1 <= self.operand_digits <= 6, f"{key}.operand_digits", "must be in [1, 6]")
        _check(2 <= self.min_operands <= self.max_operands, f"{key}.min_operands",
               f"must be >= 2 and <= {key}.max_operands")
        _check(0.0 < self.heldout_fraction < 1.0, f"{key}.heldout_fraction", "must be in (0, 1)")
        _check("{question}" in self.prompt_template, f"{key}.prompt_template",
               "must contain '{question}'")


@dataclass(frozen=True)
class Problem:
    question: str  # e.g. "37+5-12"
    answer: int


@dataclass(frozen=True)
class ArithmeticTask(ProceduralSplit[Problem]):
    operators: tuple[str, ...] = ("+", "-")
    operand_digits: int = 2
    min_operands: int = 2
    max_operands: int = 2
    heldout_fraction: float = 0.1
    split_seed: int = 0
    prompt_template: str = "{question}="
    zero_pad_operands: bool = False  # "07+88" instead of "7+88": digits at fixed positions

    heldout_salt: ClassVar[int] = 0x5EED

    # ----------------------------------------------------------------- problems and splits
    def key(self, problem: Problem) -> str:
        return problem.question

    def draw(self, rng: np.random.Generator, count: int) -> list[Problem]:
        """`count` problems from either split (vectorised draws; strings built per row)."""
        lengths = rng.integers(self.min_operands, self.max_operands + 1, size=count).tolist()
        operands = rng.integers(0, 10**self.operand_digits, size=(count, self.max_operands)).tolist()
        op_ids = rng.integers(0, len(self.operators), size=(count, self.max_operands)).tolist()
        out = []
        for n, xs, os_ in zip(lengths, operands, op_ids):
            text = [f"{x:0{self.operand_digits}d}" if self.zero_pad_operands else str(x) for x in xs]
            question = text[0] + "".join(self.operators[o] + x for o, x in zip(os_, text[1:n]))
            out.append(Problem(question, calculate(question)))
        return out

    # ----------------------------------------------------------------- text
    def prompt(self, problem: Problem) -> str:
        return self.prompt_template.format(question=problem.question)

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        """The longest prompt: all-9 operands, the most operands, the widest operator."""
        longest = "9" * self.operand_digits
        question = longest + ("-" + longest) * (self.max_operands - 1)
        return count_tokens(self.prompt_template.format(question=question))

    def demonstration(self, problem: Problem, wrong: bool, rng: np.random.Generator,
                      max_offset: int) -> str:
        """The response text of a demonstration; a wrong one is off by 1..max_offset."""
        if not wrong:
            return str(problem.answer)
        offset = int(rng.integers(1, max_offset + 1)) * (1 if rng.random() < 0.5 else -1)
        return str(problem.answer + offset)

    def tool_demonstration(self, problem: Problem, rng: np.random.Generator):
        """A warm-start episode that calls the calculator: (tool, arguments, the tool's
        output, the final answer)."""
        # The calculator reads Python arithmetic: operands without leading zeros.
        expression = re.sub(r"\d+", lambda m: str(int(m.group())), problem.question)
        return "calculator", {"expression": expression}, str(problem.answer), str(
            problem.answer)

    # ----------------------------------------------------------------- verification
    def verify_jobs(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Job]:
        check_pairs(problems, completions)
        return [{"completion": c, "answer": p.answer} for p, c in zip(problems, completions)]

    @staticmethod
    def answer_of(completion: str) -> str | None:
        return completion.strip() or None


def calculate(expression: str) -> int:
    """Integer value of `d+d-d*d...` with `*` binding tighter; no eval()."""
    tokens = re.findall(r"\d+|[+\-*]", expression)
    if not tokens or len(tokens) % 2 == 0:
        raise ValueError(f"malformed expression {expression!r}")
    terms: list[int] = []
    sign, product = 1, int(tokens[0])
    for op, num in zip(tokens[1::2], tokens[2::2]):
        if op == "*":
            product *= int(num)
        else:
            terms.append(sign * product)
            sign, product = (1 if op == "+" else -1), int(num)
    terms.append(sign * product)
    return sum(terms)


def build(t: ArithmeticTaskConfig, tokenizer) -> ArithmeticTask:
    return ArithmeticTask(tuple(t.operators), t.operand_digits, t.min_operands, t.max_operands,
                          t.heldout_fraction, t.split_seed, t.prompt_template,
                          t.zero_pad_operands)


SPEC = register(TaskSpec("arithmetic", ArithmeticTaskConfig, build, verifiers=("inprocess",)))
