"""Verdicts -> rewards. One table per scheme maps each status to a reward; nothing else decides
what a status is worth."""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from rlvr_jax.types import Status, Verdict

REWARD_TABLES: Mapping[str, Mapping[Status, float]] = {
    # 1 for a correct answer, 0 otherwise (DeepSeek-R1 style accuracy reward).
    "binary": {Status.PASS: 1.0, Status.WRONG: 0.0, Status.UNPARSEABLE: 0.0},
    # +1 / -1, with unparseable output punished like a wrong answer.
    "signed": {Status.PASS: 1.0, Status.WRONG: -1.0, Status.UNPARSEABLE: -1.0},
    # Per-failure penalty: a well-formed wrong answer beats malformed output. Gives a gradient
    # to a policy that is never right yet (e.g. a fresh model learning the answer format).
    "format_penalty": {Status.PASS: 1.0, Status.WRONG: 0.0, Status.UNPARSEABLE: -1.0},
}


def from_verdicts(verdicts: Sequence[Verdict], scheme: str) -> np.ndarray:
    """float32 rewards, one per verdict, in order."""
    table = REWARD_TABLES[scheme]
    return np.array([table[v.status] for v in verdicts], dtype=np.float32)


def status_counts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """Count of every status (zeros included, so logged series never have gaps)."""
    counts = Counter(v.status for v in verdicts)
    return {f"status/{s.name.lower()}": int(counts.get(s, 0)) for s in Status}


def summary(verdicts: Sequence[Verdict], rewards_P_G: np.ndarray) -> dict[str, float]:
    """Per-step reward metrics: status counts, accuracy (share of PASS), mean reward, and the
    share of groups whose rewards are all equal (they carry no GRPO signal)."""
    return {
        **status_counts(verdicts),
        "reward/accuracy": float(np.mean([v.status == Status.PASS for v in verdicts])),
        "reward/mean": float(rewards_P_G.mean()),
        "reward/groups_all_equal": float(np.mean(rewards_P_G.std(axis=1) == 0)),
    }
