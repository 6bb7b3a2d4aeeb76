"""Return values keep their types across the sandbox (rlvr_jax/sandbox/typed_json.py): a code
job's verdict is the one its dataset's own `assert` would give. Plain JSON made a list pass
for a tuple, `{'1': 2}` for `{1: 2}` and a dict with a duplicated key for either of its values,
and failed honest sets, bytes, complex numbers and int-keyed dicts under a dataset's test."""

import pytest

from rlvr_jax.data import code_tests
from rlvr_jax.verify import code
from rlvr_jax.sandbox.pool import VerifierPool
from tests.helpers import UNAVAILABLE

pytestmark = pytest.mark.xdist_group("sandbox")  # one worker runs every sandbox test
needs_sandbox = pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")

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
    ("assert f(1) == 1000000007", "1000000008", None, False),  # an integer is exact
    ("assert f(1) == 0.3", "0.1 + 0.2", None, True),  # a float to the tolerance
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


@needs_sandbox
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
@needs_sandbox
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


# (printed, expected, passes): a non-integer number of the expected output to 1e-6 (absolute
# or relative: the judges' rule); integers, words and anything else exactly. Exact lines
# failed an honest 0.3333333333 for 0.333333.
STDOUT = [
    ("0.3333333333\n", "0.333333", True), ("0.333333", "0.3333333333", True),
    ("2", "2.000000", True), ("1e-7", "0.0000001", True), ("1000000.5", "1000000.0", True),
    ("1 0.5\nok", "1  0.5000001\nok", True), ("-0.0", "0.0", True),
    ("0.33", "0.333333", False), ("1.0000011", "1.0", False), ("0.5\n1", "0.5", False),
    ("100001", "100000", False), ("2.0", "2", False),  # an integer answer is exact
    ("0.5 y", "0.5000001 x", False), ("1_000.5", "1000.5", False), ("nan", "0.5", False),
    ("inf", "1e400", False), ("9" * 400 + ".0", "1e400", False), ("0x1p-1", "0.5", False),
    ("1" * (1 << 20) + "x", "0.5", False),  # a megabyte of digits: no backtracking
]


@pytest.mark.parametrize("got,want,equal", [
    (1000000008, 1000000007, False), (10**12 + 1, 10**12, False), (1000000008.0, 1000000007,
    False), (1000000007.0, 1000000007, True), (0.1 + 0.2, 0.3, True), (3, 3.0, True),
    ([1, 0.30000000001], [1, 0.3], True), ({"n": 10**18 + 1}, {"n": 10**18}, False)])
def test_an_expected_integer_is_exact_and_a_float_is_near(got, want, equal):
    """JSON rows (APPS call-based, tool results): to a relative 1e-9 an answer one off a
    large integer (a modulus, 1000000007) passed."""
    assert code.same(got, want, 1e-9) is equal


@pytest.mark.parametrize("printed,expected,passes", STDOUT)
def test_printed_numbers_compare_to_the_judges_tolerance(printed, expected, passes):
    assert code.same_stdout(printed, expected) is passes


def test_a_rows_tolerance_replaces_the_judges():
    assert not code.same_stdout("0.3333333333", "0.333333", tol=0.0)
    assert code.same_stdout("2", "2.000000", tol=0.0)  # the same number
    assert code.same_stdout("0.333", "0.33", tol=0.01)


@needs_sandbox
def test_a_program_printing_more_digits_passes_and_a_rows_tolerance_holds():
    program = "import sys\nprint(1 / int(sys.stdin.read()))"
    jobs = [{"completion": program, "stdin": ["3"], "expected_stdout": ["0.333333"]},
            {"completion": program, "stdin": ["3"], "expected_stdout": ["0.33"]},
            {"completion": program, "stdin": ["3"], "expected_stdout": ["0.33"],
             "tolerance": 0.01}]
    with VerifierPool("code", workers=1, timeout_s=20.0) as pool:
        got = [v.status.name for v in pool.verify(jobs)]
    assert got == ["PASS", "WRONG", "PASS"]
