"""pass@k against brute-force enumeration; maj@k tie rule."""

import itertools
import math

import numpy as np
import pytest

from rlvr_jax.pass_at_k import majority, pass_at_k, summarize


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6])
def test_pass_at_k_equals_enumeration_over_k_subsets(n):
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_pass_at_k_large_n_is_stable():
    # C(200, 100) overflows float64 factorial-style formulas; the product form does not.
    want = 1 - math.comb(150, 100) / math.comb(200, 100)
    assert pass_at_k(200, 50, 100) == pytest.approx(want, rel=1e-9)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_majority_ties_go_to_the_earliest_answer():
    # "7" and "8" tie 2-2; "7" appeared first, and it is correct.
    assert majority(["7", "8", "8", "7"], [True, False, False, True]) is True
    assert majority(["8", "7", "7", "8"], [False, True, True, False]) is False
    assert majority([None, None, "5"], [False, False, True]) is True  # None does not vote
    assert majority([None, None], [False, False]) is False


def test_summarize_hand_computed():
    correct = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
    answers = [["3", "4", "4", "5"], ["9"] * 4, [None, "1", "2", "1"]]
    s = summarize(correct, answers, ks=[1, 2, 4, 8])
    assert s["pass@1"] == pytest.approx((0.25 + 1 + 0) / 3)
    assert s["pass@4"] == pytest.approx((1 + 1 + 0) / 3)
    assert s["pass@2"] == pytest.approx((0.5 + 1 + 0) / 3)  # 1 - C(3,2)/C(4,2) = 0.5
    assert s["maj@1"] == pytest.approx((1 + 1 + 0) / 3)
    assert s["maj@4"] == pytest.approx((0 + 1 + 0) / 3)  # "4" wins problem 0
    assert s["mean@4"] == pytest.approx(5 / 12)
    assert "pass@8" not in s
    # A task judged by its world's final state gives no answers: no maj@k (not a 0).
    assert set(summarize(correct, None, ks=[1, 4])) == {"pass@1", "mean@1", "pass@4", "mean@4"}
