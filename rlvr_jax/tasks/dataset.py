"""A task over a prompt dataset (GSM8K, MATH, verl rows) with math-answer verification.

Same interface as `ArithmeticTask` where the loop needs it: `train_batch(seed, index, count)`
(a pure function of its inputs, for exact resume: epoch-wise seeded permutations),
`heldout_set(count)`, `prompt(problem)` and `answer_of(completion)`; verification goes through
the worker pool (`verify_jobs`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from rlvr_jax.data.loaders import Problem
from rlvr_jax.verify.math import extract_answer


@dataclass
class DatasetTask:
    train: Sequence[Problem]
    test: Sequence[Problem]
    render: Callable[[Problem], str]  # problem -> prompt text (chat template applied)

    def train_batch(self, seed: int, batch_index: int, count: int) -> list[Problem]:
        n = len(self.train)
        out = []
        for pos in range(batch_index * count, (batch_index + 1) * count):
            epoch, i = divmod(pos, n)
            out.append(self.train[int(np.random.default_rng([seed, epoch]).permutation(n)[i])])
        return out

    def heldout_set(self, count: int) -> list[Problem]:
        return list(self.test[:count])

    def prompt(self, problem: Problem) -> str:
        return self.render(problem)

    @staticmethod
    def answer_of(completion: str) -> str | None:
        return extract_answer(completion)

    @staticmethod
    def verify_jobs(problems: Sequence[Problem], completions: Sequence[str]) -> list[dict]:
        if len(problems) != len(completions):
            raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
        return [{"gold": p.answer, "completion": c} for p, c in zip(problems, completions)]


def make_render(tokenizer, instruction: str) -> Callable[[Problem], str]:
    """Prompt text: the chat template with a generation prompt when the tokenizer has one,
    else the messages' contents joined by newlines. `instruction` is appended to the last user
    message (e.g. where to put the final answer)."""

    def render(problem: Problem) -> str:
        messages = [{"role": r, "content": c} for r, c in problem.messages]
        if instruction:
            last = max(i for i, m in enumerate(messages) if m["role"] == "user")
            messages[last] = dict(messages[last],
                                  content=f"{messages[last]['content']} {instruction}")
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                 tokenize=False)
        return "\n".join(m["content"] for m in messages) + "\n"

    return render
