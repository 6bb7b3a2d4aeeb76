"""A task over a prompt dataset (GSM8K, MATH, verl rows) with math-answer verification.

A `Task` (tasks/base.py): the training stream is epoch-wise seeded permutations of the train
split (a pure function of (seed, batch index), for exact resume), the held-out set is the test
split's first rows, and verification goes through the math worker pool. Prompts longer than
`max_prompt_tokens` are bad rows: an error naming file:line, or skipped if asked (`load`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from rlvr_jax.config.choices import DataFormat, OnBadRow, _check
from rlvr_jax.data import loaders
from rlvr_jax.data.loaders import Problem
from rlvr_jax.tasks.base import Job, NoDemonstrations, check_pairs
from rlvr_jax.tasks.registry import TaskSpec, register
from rlvr_jax.verify.math import extract_answer


@dataclass
class DatasetTaskConfig:
    """Prompts from local JSONL/Parquet files (GSM8K, MATH or verl rows; data/loaders.py),
    answers checked by the `math` verifier."""

    name: str = "dataset"
    train_path: str = ""
    test_path: str = ""
    format: DataFormat = DataFormat["auto"]
    on_bad_row: OnBadRow = OnBadRow["raise"]  # raise: error naming file:line | skip: counted
    instruction: str = 'Let\'s think step by step and output the final answer after "####".'
    max_prompt_tokens: int = 512  # longer prompts are bad rows

    def check(self, key: str = "task") -> None:
        _check(bool(self.train_path) and bool(self.test_path), f"{key}.train_path",
               "task=dataset needs task.train_path and task.test_path")
        _check(self.max_prompt_tokens >= 1, f"{key}.max_prompt_tokens", "must be >= 1")


@dataclass
class DatasetTask:
    train: Sequence[Problem]
    test: Sequence[Problem]
    render: Callable[[Problem], str]  # problem -> prompt text (chat template applied)
    longest_prompt: int  # tokens in the longest rendered prompt of either split

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

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        return self.longest_prompt

    def demonstration(self, problem: Problem, wrong: bool, rng: np.random.Generator,
                      max_offset: int) -> str:
        raise NoDemonstrations("task=dataset has no demonstrations for a warm start: set "
                               "model.path to a Hugging Face directory (or warmup.steps=0)")

    @staticmethod
    def answer_of(completion: str) -> str | None:
        return extract_answer(completion)

    @staticmethod
    def verify_jobs(problems: Sequence[Problem], completions: Sequence[str]) -> list[Job]:
        check_pairs(problems, completions)
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


def load(train_path: str, test_path: str, fmt: str, on_bad_row: str, max_prompt_tokens: int,
         tokenizer, instruction: str, read=None) -> DatasetTask:
    """The dataset task over two files; prompts past `max_prompt_tokens` are bad rows (an error
    naming the row, or skipped with a count when `on_bad_row` is "skip"). `read(path,
    on_bad_row) -> (problems, skipped)`: another row parser (default: loaders.load's
    formats); its problems need `messages`."""
    render = make_render(tokenizer, instruction)
    read = read or (lambda path, on_bad: loaders.load(path, fmt, on_bad))
    splits, longest = [], 1
    for path in (train_path, test_path):
        problems, skipped = read(path, on_bad_row)
        kept = []
        for p in problems:
            n = len(tokenizer.encode(render(p), add_special_tokens=False))
            if n > max_prompt_tokens:
                if on_bad_row == "raise":
                    raise loaders.DatasetError(
                        f"{p.uid}: prompt of {n} tokens exceeds task.max_prompt_tokens="
                        f"{max_prompt_tokens}")
                skipped += 1
                continue
            kept.append(p)
            longest = max(longest, n)
        if skipped:
            print(f"{path}: skipped {skipped} bad rows (task.on_bad_row=skip)", flush=True)
        splits.append(kept)
    return DatasetTask(splits[0], splits[1], render, longest)


SPEC = register(TaskSpec(
    "dataset", DatasetTaskConfig,
    lambda t, tokenizer: load(t.train_path, t.test_path, t.format, t.on_bad_row,
                              t.max_prompt_tokens, tokenizer, t.instruction),
    verifiers=("math",), demonstrations=False))
