"""A procedural preference source on any task with demonstrations (the arithmetic task by
default): pairs of a correct and a wrong response to the same problem, the correct one
preferred by a hidden gold criterion (the verifier's), then each label flipped with
probability `label_noise`, as human labels disagree. The gold label stays known, so a reward
model's agreement with the truth, and a policy's gold accuracy, remain measurable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlvr_jax.tasks.base import Task


@dataclass(frozen=True)
class LabelledPair:
    problem: Any
    prompt: str
    chosen: str  # as labelled (noisy)
    rejected: str
    gold_agrees: bool  # the label matches the gold criterion (the chosen one is correct)


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
