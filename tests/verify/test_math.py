"""The math verifier: answer extraction, equivalence, the pool against in-process checks."""

import pytest

from rlvr_jax.types import Status
from rlvr_jax.verify import math as vmath
from rlvr_jax.sandbox.pool import VerifierPool


@pytest.mark.parametrize("text,want", [
    ("so the answer is \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
    ("nested \\boxed{\\{1, \\{2\\}\\}}", "\\{1, \\{2\\}\\}"),
    ("work...\n#### 1,234\nextra", "1,234"),
    ("I think 3 then 42.5 apples", "42.5"),
    ("no digits", None),
])
def test_answer_extraction(text, want):
    assert vmath.extract_answer(text) == want


@pytest.mark.parametrize("gold,completion,status", [
    ("72", "#### 72", Status.PASS),
    ("0.5", "\\boxed{\\frac12}", Status.PASS),
    ("1000", "It is 1,000.", Status.PASS),
    ("\\{1,2\\}", "\\boxed{\\{2,1\\}}", Status.PASS),
    ("(0,1]", "\\boxed{(0,1]}", Status.PASS),
    ("\\frac{1}{2^{99}}", "\\boxed{2^{-99}}", Status.PASS),
    ("3", "\\boxed{4}", Status.WRONG),
    ("3", "I do not know", Status.UNPARSEABLE),
    # math-verify's known misses, rejected here:
    ("4", "\\boxed{4\\sqrt{2}}", Status.WRONG),
    ("\\frac{1}{2^{99}}", "\\boxed{\\frac{1}{2^{98}}}", Status.WRONG),
])
def test_math_equivalence(gold, completion, status):
    assert vmath.check(gold, completion).status == status


def test_math_pool_matches_in_process_and_caches():
    jobs = [{"gold": "7", "completion": "#### 7"}, {"gold": "7", "completion": "#### 8"},
            {"gold": "\\frac{3}{4}", "completion": "\\boxed{0.75}"}]
    with VerifierPool("math", workers=2) as pool:
        first = pool.verify(jobs)
        assert [v.status for v in first] == [vmath.check(j["gold"], j["completion"]).status
                                             for j in jobs]
        assert [v.status for v in pool.verify(jobs)] == [v.status for v in first]
        assert len(pool._cache) == 3
