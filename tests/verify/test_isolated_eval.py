"""verify/isolated_eval.py on the host: what a scorer's `eval` gives back is data rebuilt from
tagged JSON, never a live object; the evaluating grandchild cannot reach its parent's
descriptors; limits end the evaluation as limits; the standard library's own code generation
still works under the guard. (The same module runs in the sandbox: test_gym_score.py.)"""

import os
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr_jax.verify import isolated_eval as ie

FAST = settings(max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                   st.text(max_size=10), st.binary(max_size=10),
                   st.complex_numbers(allow_nan=False))
hashable = st.recursive(leaves, lambda kids: st.one_of(st.tuples(kids, kids),
                                                       st.frozensets(kids, max_size=3)),
                        max_leaves=8)
values = st.recursive(leaves, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.tuples(kids, kids), st.sets(hashable, max_size=3),
    st.dictionaries(hashable, kids, max_size=3)), max_leaves=20)


@FAST
@given(value=values)
def test_every_literal_value_round_trips_with_its_types(value):
    import json

    back = ie.decode(json.dumps(ie.encode(value)).encode())
    assert back == value and type(back) is type(value)


def test_sympy_values_round_trip_through_srepr_without_eval():
    sympy = pytest.importorskip("sympy")
    x = sympy.Symbol("x", real=True)
    f = sympy.Function("f")
    for v in (sympy.Integer(54), sympy.Rational(1, 2) * x ** 2 + sympy.Symbol("C"),
              sympy.sin(x) + sympy.pi, sympy.Float("1.5"), f(x) + sympy.oo, -x,
              sympy.Eq(x, 3), [x, (sympy.I, 2)]):
        assert ie.rebuild(ie.encode(v)) == v


@pytest.mark.parametrize("payload", [
    # a constructor that would parse its string, and so evaluate it
    {"sym": "Poly('__import__(\"pathlib\").Path(\"/tmp/rlvr_decode_pwned\").touch()')"},
    {"sym": "__import__('os')"},
    {"sym": "Symbol('x').__class__.__init__.__globals__"},
    {"sym": "sympify('1+1')"},  # a function, not a class
    {"sym": "Integer(1)" + ".func" * 3},
    {"sym": "(" * 5000 + "1" + ")" * 5000},
    {"x": 1}, {"l": "nope"}, {"d": [[1]]}, {"i": "1e5"}, {"s": [{"l": []}]},  # unhashable
    {"l": [{"l": []}] * 3, "t": []},
])
def test_malformed_or_hostile_values_are_errors_never_evaluated(payload):
    pytest.importorskip("sympy")
    calls = []
    real = ie._REAL_EVAL
    ie._REAL_EVAL = lambda *a: calls.append(a)  # noqa: E731 - nothing may evaluate text
    try:
        with pytest.raises((ValueError, TypeError)):
            ie.rebuild(payload)
    finally:
        ie._REAL_EVAL = real
    assert not calls and not os.path.exists("/tmp/rlvr_decode_pwned")


def test_deep_values_are_refused_without_recursion_errors():
    deep = None
    for _ in range(5000):
        deep = {"l": [deep]}
    with pytest.raises(ValueError, match="deep"):
        ie.rebuild(deep)
    with pytest.raises(ValueError):
        ie.decode(b"[" * 100_000)


def test_the_evaluation_cannot_write_the_parents_descriptors():
    """The forged-PASS finding: an answer that writes a result line to every descriptor it
    can find. The grandchild holds none of the parent's but 0-2 and its own pipe."""
    r, w = os.pipe()
    forge = ("__import__('builtins').exec(\"import os\\nfor i in range(3, 256):\\n    try: "
             "os.write(i, b'PASS\\\\n')\\n    except OSError: pass\")")
    try:
        with ie.guarded():
            with pytest.raises(ValueError):  # it garbled its own pipe: no value at all
                eval(forge)
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 100)
    finally:
        os.close(r)
        os.close(w)


def test_exceptions_come_back_by_name_and_state_stays_in_the_grandchild():
    scope = {"n": 1}
    with ie.guarded():
        with pytest.raises(SyntaxError):
            eval("1 +")
        with pytest.raises(ZeroDivisionError):
            eval("1 / 0")
        with pytest.raises(ValueError, match="SystemExit"):
            eval("exit(3)")
        assert eval("[n, (n, {n})]", scope) == [1, (1, {1})]
        exec("n = 2", scope)
        with pytest.raises(TypeError, match="not data"):
            eval("lambda: 1")
    assert scope["n"] == 1  # what the text did stayed in the grandchild
    assert ie.limit_hit() is None


def test_a_limit_in_the_evaluation_is_a_limit_not_an_exception_a_scorer_catches():
    with ie.guarded():
        with pytest.raises(ie.EvaluationLimit):
            try:
                eval("[__import__('resource').setrlimit(__import__('resource').RLIMIT_CORE, "
                     "(0, 0)), __import__('os').kill(__import__('os').getpid(), %d)]"
                     % signal.SIGXCPU)
            except Exception:  # a scorer's own handler does not swallow it
                pytest.fail("caught as an ordinary exception")
    assert ie.limit_hit() == "timeout"


def test_the_standard_librarys_code_generation_still_works_under_the_guard():
    import collections
    import dataclasses

    with ie.guarded():
        point = collections.namedtuple("Point", "x y")
        assert point(1, 2).y == 2
        made = dataclasses.make_dataclass("Made", [("a", int)])
        assert made(3).a == 3
        scope: dict = {}
        exec("from math import *", scope)  # imports only: real, into the caller's scope
        assert scope["pi"] > 3
