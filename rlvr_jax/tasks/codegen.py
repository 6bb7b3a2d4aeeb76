"""Procedural code generation: write the Python function a short spec describes.

Prompt `x*3+37=` -> response `def f(x):return x*3+37`. The response is executed in the
sandbox (code verifier) on fixed test inputs; expected outputs are computed here, on the host,
and never enter the sandbox. Warm-start demonstrations are wrong (an off-by-k constant) with a
configurable probability, as in the arithmetic task, so RL has something to remove. Splits are
hash-disjoint: a spec is either for training or held out, never both.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

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
class CodegenTask:
    heldout_fraction: float = 0.1
    split_seed: int = 0

    def is_heldout(self, spec: Spec) -> bool:
        digest = hashlib.blake2b(f"{self.split_seed}:{spec.text}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") / 2.0**64 < self.heldout_fraction

    def _draw(self, rng: np.random.Generator, count: int) -> list[Spec]:
        m = rng.integers(0, 2, count)
        a = rng.integers(1, 10, count)
        s = rng.integers(0, 2, count)
        b = rng.integers(0, 100, count)
        return [Spec("*+"[i], int(x), "+-"[j], int(y)) for i, x, j, y in zip(m, a, s, b)]

    def sample(self, rng, heldout: bool, count: int) -> list[Spec]:
        out: list[Spec] = []
        while len(out) < count:
            out += [p for p in self._draw(rng, count) if self.is_heldout(p) == heldout]
        return out[:count]

    def train_batch(self, seed: int, batch_index: int, count: int) -> list[Spec]:
        return self.sample(np.random.default_rng([seed, batch_index]), False, count)

    def heldout_set(self, count: int) -> list[Spec]:
        rng = np.random.default_rng([self.split_seed, 0xC0DE])
        seen: dict[str, Spec] = {}
        for _ in range(200):
            for p in self.sample(rng, True, count):
                seen.setdefault(p.text, p)
            if len(seen) >= count:
                break
        return list(seen.values())[:count]

    def prompt(self, spec: Spec) -> str:
        return f"{spec.text}="

    def demonstration(self, spec: Spec, wrong: bool, rng, max_offset: int) -> str:
        b = spec.b
        if wrong:
            b = abs(b + int(rng.integers(1, max_offset + 1)) * (1 if rng.random() < 0.5 else -1))
        return f"def f(x):return x{spec.mul_or_add}{spec.a}{spec.sign}{b}"

    @staticmethod
    def answer_of(completion: str) -> str | None:
        return completion.strip() or None

    @staticmethod
    def verify_jobs(specs: Sequence[Spec], completions: Sequence[str]) -> list[dict]:
        return [{"completion": c, "entry_point": "f", "inputs": [[x] for x in INPUTS],
                 "expected": [s(x) for x in INPUTS]} for s, c in zip(specs, completions)]
