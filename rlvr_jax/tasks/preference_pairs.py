"""Where preference pairs come from (`preferences.*`), as a `PairSource`: batch k of the
training stream (a pure function of the seed and k, so a resumed run gets the same pairs),
the held-out pairs, and the prompt slots they need.

- procedural (default), on any task with demonstrations (the arithmetic task by default):
  pairs of a correct and a wrong response to the same problem, the correct one preferred by
  a hidden gold criterion (the verifier's), then each label flipped with probability
  `label_noise`, as human labels disagree. The gold label stays known, so a reward model's
  agreement with the truth, and a policy's gold accuracy, remain measurable.
- files (`preferences.train_path` / `test_path`, data/preferences.py formats): the labels
  as given (no gold); the stream visits every pair once per epoch, in a seeded order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from rlvr_jax.data import preferences
from rlvr_jax.data.loaders import DatasetError
from rlvr_jax.tasks.base import Task


@dataclass(frozen=True)
class LabelledPair:
    problem: Any
    prompt: str
    chosen: str  # as labelled (noisy)
    rejected: str
    gold_agrees: Optional[bool]  # the label matches the gold criterion; None: unknown (files)


@dataclass(frozen=True)
class PairSource:
    batch: Callable[[int], list]  # batch index -> that step's pairs
    heldout: list  # pairs for the held-out pairwise accuracy
    prompt_len: int  # prompt slots (left-padded) that every pair's prompt fits


def procedural_pairs(task: Task, *, seed: int, batch_index: int, count: int,
                     label_noise: float, max_offset: int) -> list[LabelledPair]:
    """Batch `batch_index` of `count` pairs: a pure function of its arguments (a resumed run
    gets the same pairs). The wrong response is off by 1..max_offset, in the same format."""
    return labelled_pairs(task, task.train_batch(seed + 0x9E3, batch_index, count),
                          np.random.default_rng([seed, batch_index, 0xB7]), label_noise,
                          max_offset)


def heldout_pairs(task: Task, *, seed: int, count: int, label_noise: float,
                  max_offset: int) -> list[LabelledPair]:
    """Pairs on the task's held-out problems (disjoint from every training batch)."""
    return labelled_pairs(task, task.heldout_set(count), np.random.default_rng([seed, 0xE7A1]),
                          label_noise, max_offset)


def labelled_pairs(task: Task, problems, rng: np.random.Generator, label_noise: float,
                   max_offset: int) -> list[LabelledPair]:
    out = []
    for p in problems:
        good = task.demonstration(p, False, rng, max_offset)
        bad = task.demonstration(p, True, rng, max_offset)
        agrees = bool(rng.random() >= label_noise)
        chosen, rejected = (good, bad) if agrees else (bad, good)
        out.append(LabelledPair(p, task.prompt(p), chosen, rejected, agrees))
    return out


def procedural_source(task: Task, *, seed: int, count: int, label_noise: float,
                      max_offset: int, heldout: int, prompt_len: int) -> PairSource:
    """The task's procedural pairs (prompts are the task's: `prompt_len` slots)."""
    def batch(k: int):
        return procedural_pairs(task, seed=seed, batch_index=k, count=count,
                                label_noise=label_noise, max_offset=max_offset)

    return PairSource(batch, heldout_pairs(task, seed=seed, count=heldout,
                                           label_noise=label_noise, max_offset=max_offset),
                      prompt_len)


def file_pairs(path: str, *, fmt: str, on_bad_row: str, render: Callable, count_tokens:
               Callable[[str], int], max_response_tokens: int) -> list[LabelledPair]:
    """The pairs of one file, each prompt rendered to text (`render`: the chat template, or
    the contents joined). A response longer than `max_response_tokens` (with EOS) is a bad
    row: an error naming the row, or skipped and counted with `on_bad_row=skip`."""
    rows, skipped = preferences.load(path, fmt, on_bad_row)
    out = []
    for row in rows:
        longest = max(count_tokens(row.chosen), count_tokens(row.rejected)) + 1
        if longest > max_response_tokens:
            if on_bad_row == "raise":
                raise DatasetError(f"{row.uid}: a response of {longest} tokens (with EOS) "
                                   f"exceeds sampling.max_new_tokens={max_response_tokens}")
            skipped += 1
            continue
        out.append(LabelledPair(row, render(row), row.chosen, row.rejected, None))
    if skipped:
        print(f"{path}: skipped {skipped} bad rows (preferences.on_bad_row=skip)", flush=True)
    if not out:
        raise DatasetError(f"{path}: no usable preference pairs")
    return out


def file_source(train: list[LabelledPair], test: list[LabelledPair], *, seed: int, count: int,
                prompt_len: int) -> PairSource:
    """Batches of `count` from `train`: position j of the stream is pair
    perm_e[j mod N] of epoch e = j // N, each epoch a fresh seeded permutation."""
    n = len(train)

    @functools.lru_cache(maxsize=2)  # a batch spans at most two epochs
    def order(epoch: int) -> np.ndarray:
        return np.random.default_rng([seed, epoch, 0x5EED]).permutation(n)

    def batch(k: int):
        return [train[order(j // n)[j % n]] for j in range(k * count, (k + 1) * count)]

    return PairSource(batch, test, prompt_len)
