"""Sampling metrics for evaluation with n samples per problem.

pass@k (Chen et al. 2021, arXiv:2107.03374, eq. 1), unbiased for k <= n with c correct of n:

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

(the product form never forms a large binomial). mean@k: the expected accuracy of k samples,
which for the first k of n exchangeable samples is estimated by c / n. maj@k: the share of
problems whose majority answer among the first k samples is correct.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional, Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with `c` correct out of `n` samples."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority(answers: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """Whether the majority answer is correct. Unparsed answers (None) do not vote. Ties go to
    the tied answer that appeared first (the earliest sample): deterministic, and a fixed rule
    rather than a lucky pick. No vote at all counts as wrong."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return False
    top = max(votes.values())
    winner = next(a for a in answers if a is not None and votes[a] == top)
    return bool(correct[answers.index(winner)])


def summarize(correct_P_G: np.ndarray, answers_P_G: Optional[Sequence[Sequence[str | None]]],
              ks: Sequence[int]) -> dict[str, float]:
    """pass@k, mean@k and maj@k over problems, for each k <= n; no maj@k without answers
    (None: a task judged by its world's final state, whose texts give no answer to vote on)."""
    correct_P_G = np.asarray(correct_P_G, bool)
    p, n = correct_P_G.shape
    out = {}
    for k in ks:
        if k > n:
            continue
        out[f"pass@{k}"] = float(np.mean([pass_at_k(n, int(c), k) for c in correct_P_G.sum(1)]))
        out[f"mean@{k}"] = float(correct_P_G.mean())
        if answers_P_G is not None:
            out[f"maj@{k}"] = float(np.mean([majority(list(answers_P_G[i][:k]),
                                                      correct_P_G[i, :k]) for i in range(p)]))
    return out
