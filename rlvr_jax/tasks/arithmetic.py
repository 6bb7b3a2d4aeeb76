"""Procedural arithmetic: `37+5-12=` -> `30`.

Problems are expressions of `min_operands..max_operands` operands with `operand_digits` digits,
joined by the configured operators and evaluated with the usual precedence (`*` before `+`/`-`).

Splits are disjoint by construction: an expression belongs to the held-out split iff a salted
hash of its text falls below `heldout_fraction`, so no training batch can ever contain a held-out
expression, whatever the seed or step. The training stream is a pure function of
(seed, batch index): resuming at batch k reproduces exactly the problems a run without the
restart would have seen.

The verifier is trusted and in-process: the completion must be exactly one integer (leading and
trailing whitespace allowed). Anything else is UNPARSEABLE rather than WRONG, so the logs tell
format failures from arithmetic failures.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from rlvr_jax.types import Status, Verdict

_INT = re.compile(r"\s*(-?\d+)\s*")


@dataclass(frozen=True)
class Problem:
    question: str  # e.g. "37+5-12"
    answer: int


@dataclass(frozen=True)
class ArithmeticTask:
    operators: tuple[str, ...] = ("+", "-")
    operand_digits: int = 2
    min_operands: int = 2
    max_operands: int = 2
    heldout_fraction: float = 0.1
    split_seed: int = 0
    prompt_template: str = "{question}="
    zero_pad_operands: bool = False  # "07+88" instead of "7+88": digits at fixed positions

    # ----------------------------------------------------------------- problems and splits
    def is_heldout(self, question: str) -> bool:
        digest = hashlib.blake2b(f"{self.split_seed}:{question}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") / 2.0**64 < self.heldout_fraction

    def _draw(self, rng: np.random.Generator, count: int) -> list[Problem]:
        """`count` problems from either split (vectorised draws; strings built per row)."""
        lengths = rng.integers(self.min_operands, self.max_operands + 1, size=count).tolist()
        operands = rng.integers(0, 10**self.operand_digits, size=(count, self.max_operands)).tolist()
        op_ids = rng.integers(0, len(self.operators), size=(count, self.max_operands)).tolist()
        out = []
        for n, xs, os_ in zip(lengths, operands, op_ids):
            text = [f"{x:0{self.operand_digits}d}" if self.zero_pad_operands else str(x) for x in xs]
            question = text[0] + "".join(self.operators[o] + x for o, x in zip(os_, text[1:n]))
            out.append(Problem(question, evaluate(question)))
        return out

    def sample(self, rng: np.random.Generator, heldout: bool, count: int) -> list[Problem]:
        """Rejection-sample `count` problems from the requested split."""
        out: list[Problem] = []
        while len(out) < count:
            out += [p for p in self._draw(rng, count) if self.is_heldout(p.question) == heldout]
        return out[:count]

    def train_batch(self, seed: int, batch_index: int, count: int) -> list[Problem]:
        """Batch `batch_index` of the training stream: a pure function of its inputs, so a
        resumed run that asks for batch k gets exactly what an uninterrupted run got."""
        return self.sample(np.random.default_rng([seed, batch_index]), heldout=False, count=count)

    def heldout_set(self, count: int) -> list[Problem]:
        """A fixed list of distinct held-out problems (the same for every run of this task)."""
        rng = np.random.default_rng([self.split_seed, 0x5EED])
        seen: dict[str, Problem] = {}
        for _ in range(100):
            for p in self.sample(rng, heldout=True, count=count):
                seen.setdefault(p.question, p)
            if len(seen) >= count:
                break
        if len(seen) < count:
            raise ValueError(f"task has fewer than {count} distinct held-out problems; "
                             "lower eval.num_problems or raise task.heldout_fraction")
        return list(seen.values())[:count]

    # ----------------------------------------------------------------- text
    def prompt(self, problem: Problem) -> str:
        return self.prompt_template.format(question=problem.question)

    def demonstration(self, problem: Problem, wrong: bool, rng: np.random.Generator,
                      max_offset: int) -> str:
        """The response text of a demonstration; a wrong one is off by 1..max_offset."""
        if not wrong:
            return str(problem.answer)
        offset = int(rng.integers(1, max_offset + 1)) * (1 if rng.random() < 0.5 else -1)
        return str(problem.answer + offset)

    # ----------------------------------------------------------------- verification
    def verify(self, problem: Problem, completion: str) -> Verdict:
        m = _INT.fullmatch(completion)
        if m is None:
            return Verdict(Status.UNPARSEABLE, f"not an integer: {completion[:40]!r}")
        got = int(m.group(1))
        if got == problem.answer:
            return Verdict(Status.PASS)
        return Verdict(Status.WRONG, f"expected {problem.answer}, got {got}")


def evaluate(expression: str) -> int:
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


def verify_all(task: ArithmeticTask, problems: Sequence[Problem],
               completions: Sequence[str]) -> list[Verdict]:
    if len(problems) != len(completions):
        raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
    return [task.verify(p, c) for p, c in zip(problems, completions)]


def repeat_each(items: Sequence, times: int) -> Iterator:
    """[a, b] x 2 -> a, a, b, b: the P_G order used everywhere (groups are contiguous)."""
    for item in items:
        for _ in range(times):
            yield item
