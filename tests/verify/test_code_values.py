"""Return values keep their types across the sandbox (rlvr_jax/sandbox/typed_json.py): a code
job's verdict is the one its dataset's own `assert` would give. Plain JSON made a list pass
for a tuple, `{'1': 2}` for `{1: 2}` and a dict with a duplicated key for either of its values,
and failed honest sets, bytes, complex numbers and int-keyed dicts under a dataset's test."""

import pytest

from rlvr_jax.data import code_tests
from rlvr_jax.sandbox.pool import VerifierPool
from tests.helpers import UNAVAILABLE

pytestmark = [pytest.mark.xdist_group("sandbox"),  # one worker runs every sandbox test
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]

# (test, candidate's return value, reference's return value or None, passes in Python)
MBPP = [
    ("assert f(1) == (4, 5)", "[4, 5]", None, False),
    ("assert f(1) == [4, 5]", "(4, 5)", None, False),
    ("assert f(1) == [(1, 2)]", "[[1, 2]]", None, False),
    ("assert f(1) == {1: 2}", "{'1': 2}", None, False),
    ("assert f(1) == {1: 2}", "{1: 2}", None, True),
    ("assert f(1) == {1: 'x'}", "{1: 'y', '1': 'x'}", None, False),
    ("assert f(1) == {4, 5}", "{5, 4}", None, True),
    ("assert f(1) == {4, 5}", "[4, 5]", None, False),
    ("assert f(1) == b'ab'", "b'ab'", None, True),
    ("assert f(1) == b'ab'", "'ab'", None, False),
    ("assert f(1) == 1+2j", "1+2j", None, True),
    ("assert f((1, 2)) == 3", "x[0] + x[1] if isinstance(x, tuple) else 0", None, True),
    ("assert f({1: 2}) == 2", "x.get(1, 0)", None, True),
    # Not literal comparisons: the dataset's test replayed on the candidate's values.
    ("assert set(f(1)) == {4, 5}", "{4, 5}", "(4, 5)", True),
    ("assert f(1) == frozenset({1})", "frozenset({1})", "frozenset({1})", True),
    ("assert f(1) == (4, 5) and True", "[4, 5]", "(4, 5)", False),
    ("assert f(1) == [4, 5] and True", "(4, 5)", "[4, 5]", False),
    ("assert f(1) == {1: 2} and True", "{1: 2}", "{1: 2}", True),
]


def _mbpp_job(test, returned, reference):
    spec = {"test_list": [test]}
    if reference:
        spec["code"] = f"def f(x):\n    return {reference}"
    return dict(code_tests.tests_of(spec, "row"), completion=f"def f(x):\n    return {returned}")


def test_verdicts_are_those_of_pythons_equality():
    jobs = [_mbpp_job(*case[:3]) for case in MBPP]
    # APPS call-based rows come from JSON, as their harness compares: a returned tuple is the
    # list, a set (no JSON form) is nothing, and one-element outputs may come unwrapped.
    apps = {"fn_name": "f", "inputs": [[1]], "outputs": [[4, 5]]}
    for returned, passes in (("(4, 5)", True), ("[4, 5]", True), ("{4, 5}", False),
                             ("{'a': 1}", False)):
        jobs.append(dict(code_tests.tests_of(apps, "apps"), completion=f"def f(x):\n    return {returned}"))
    expect = [case[3] for case in MBPP] + [True, True, False, False]
    with VerifierPool("code", workers=2, timeout_s=20.0) as pool:
        verdicts = pool.verify(jobs)
    got = [v.status.name == "PASS" for v in verdicts]
    wrong = [(i, v.status.name, v.detail) for i, (v, g, e) in enumerate(zip(verdicts, got, expect))
             if g != e]
    assert not wrong
    assert all(v.status.name in ("PASS", "WRONG") for v in verdicts)
    assert "got [4, 5]" in verdicts[0].detail and "got (4, 5)" in verdicts[1].detail


@pytest.mark.parametrize("test,returned,passes", [
    # f(f(1)): the candidate ran on the reference's f(1) = 4, not on its own 100; answering
    # its second call with the value for 4 passed a wrong f
    ("assert f(f(1)) == 7", "x + 3 if x != 1 else 100", False),
    ("assert f(f(1)) == 7", "x + 3", True),
    # a test that stops calling on the candidate's output: its later calls were never checked
    ("for x in (1, 2, 3):\n    if f(x) is None: break\n    assert f(x) == x + 3",
     "None if x == 1 else x + 3", False),
    # an exception the test expects comes back as its class
    ("try:\n    f(-1)\n    assert False\nexcept ValueError:\n    pass\nassert f(1) == 4",
     "x + 3 if x >= 0 else int('no')", True),
])
def test_a_replayed_test_answers_only_the_calls_the_candidate_ran(test, returned, passes):
    """The dataset's test replayed on the candidate's outputs: each of its calls must repeat
    a recorded call's arguments (else the answer would be for the reference's value), every
    recorded call must be made, and a raised built-in exception keeps its class."""
    spec = {"test_list": [test], "code": "def f(x):\n    if x < 0:\n        raise ValueError\n"
                                         "    return x + 3"}
    job = dict(code_tests.tests_of(spec, "row"),
               completion=f"def f(x):\n    return {returned}")
    with VerifierPool("code", workers=1, timeout_s=20.0) as pool:
        v = pool.verify([job])[0]
    assert (v.status.name == "PASS") is passes, v.detail
