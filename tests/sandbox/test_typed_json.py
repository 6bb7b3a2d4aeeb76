"""The typed value encoding (rlvr_jax/sandbox/typed_json.py): round trips keep types, `same`
never calls two values equal that Python's `==` tells apart, and no encoding makes it raise."""

import json
import os
import subprocess
import sys
from collections import Counter, OrderedDict, namedtuple
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from rlvr_jax.sandbox import typed_json as tj

# Plain data without bools (`same` keeps bool apart from numbers, which Python's == does not)
# and without NaN (never equal to itself).
_SCALARS = (st.none() | st.integers(-10**30, 10**30) | st.floats(allow_nan=False, width=32)
            | st.text(max_size=4) | st.binary(max_size=4)
            | st.complex_numbers(allow_nan=False, max_magnitude=1e6))
_HASHABLE = st.recursive(_SCALARS, lambda inner: st.tuples(inner, inner)
                         | st.frozensets(inner, max_size=3), max_leaves=6)
_VALUES = st.recursive(_HASHABLE, lambda inner: st.lists(inner, max_size=3)
                       | st.tuples(inner) | st.sets(_HASHABLE, max_size=3)
                       | st.dictionaries(_HASHABLE, inner, max_size=3), max_leaves=10)


def _typed_equal(a, b) -> bool:
    """Equal and of the same types all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_typed_equal, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_typed_equal(a[k], b[k]) for k in a)
    return a == b


@given(_VALUES)
@settings(max_examples=150, deadline=None)
def test_a_value_comes_back_as_itself(value):
    wire = json.loads(json.dumps(tj.encode(value)))
    assert _typed_equal(tj.decode(wire), value)
    assert tj.same(wire, tj.encode(value), 0.0)


@given(_VALUES, _VALUES)
@settings(max_examples=250, deadline=None)
def test_same_agrees_with_pythons_equality(a, b):
    """Exactly (tolerance 0): equal encodings are equal values and equal values are equal
    encodings, whatever the containers (a tuple is no list, a set equals a frozenset)."""
    assert tj.same(tj.encode(a), tj.encode(b), 0.0) == (a == b)


@pytest.mark.parametrize("got,want,equal", [
    ((4, 5), [4, 5], False), ([(1, 2)], [[1, 2]], False), ({"1": 2}, {1: 2}, False),
    ({1.0: "a"}, {1: "a"}, True), ({1, 2}, frozenset({2, 1}), True), (2 + 0j, 2, True),
    (b"ab", "ab", False), (True, 1, False), (Counter("aab"), {"a": 2, "b": 1}, True),
    (namedtuple("P", "x y")(1, 2), (1, 2), True), (OrderedDict(b=1, a=2), {"a": 2, "b": 1}, True),
    (Fraction(1, 2), 0.5, True), ([Fraction(3, 1)], [3], True), (Fraction(1, 3), 0.5, False),
    (1000000008, 1000000007, False), ((10**12 + 1,), (10**12,), False), (0.1 + 0.2, 0.3, True),
    (1000000008 + 0j, 1000000007, False), (2, 2 + 0j, True), (1000000007.0, 1000000007, True),
])
def test_pythons_equality_by_example(got, want, equal):
    assert tj.same(tj.encode(got), tj.encode(want), 1e-9) is equal


def test_a_forged_encoding_equals_nothing_and_never_raises():
    """What the candidate's process writes is untrusted: duplicate keys (JSON's decoder kept
    the last one, so `{1: 'y', '1': 'x'}` passed for `{1: 'x'}`), unknown tags, bad bodies."""
    want = tj.encode({1: "x"})
    for forged in ({"dict": [[1, "y"], [1, "x"]]}, {"dict": [[1]]}, {"dict": 5},
                   {"tuple": "ab"}, {"bytes": [1]}, {"complex": ["a", 1]}, {"eval": "1"},
                   {"a": 1, "b": 2}, {}, {"set": [[1, 2]]}):
        assert not tj.same(forged, want, 1e-9)
        assert isinstance(tj.show(forged), str)
    with pytest.raises(tj.NotAValue):
        tj.as_json({"dict": [[1, "y"], ["1", "x"]]})


def test_json_rows_compare_as_json_writes_the_value():
    assert tj.as_json(tj.encode({1: (2, 3), "a": None, None: 1.5})) == {
        "1": [2, 3], "a": None, "null": 1.5}
    for no_json in ({1, 2}, b"x", 1j, {(1, 2): 3}):
        with pytest.raises(tj.NotAValue):
            tj.as_json(tj.encode(no_json))


def test_anything_else_is_no_value():
    for value in (object(), print, iter([1]), [1, object()]):
        with pytest.raises(tj.NotAValue):
            tj.encode(value)


def test_show_is_pythons_repr_cut_to_its_limit():
    for value in ((1,), {1: b"a"}, {3, 1}, frozenset(), set(), [1.5, None, "s"], 2j):
        shown = tj.show(tj.encode(value))
        assert eval(shown) == value
    assert len(tj.show(tj.encode(list(range(10**4))), 50)) == 50


def test_a_set_is_written_the_same_whatever_the_hash_seed():
    """Set order follows string hashes, which each process seeds at random: the encoding sorts
    elements, so verdict details repeat run to run."""
    code = ("import json, typed_json as t; "
            "print(json.dumps(t.encode({'a', 'bb', 'ccc', 'dd', (1, 'e'), frozenset('xyz')})))")
    here = os.path.dirname(tj.__file__)  # standalone, as the sandbox imports it
    outs = {subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True,
                           env=dict(os.environ, PYTHONHASHSEED=seed), text=True,
                           check=True).stdout for seed in ("1", "2", "3")}
    assert len(outs) == 1
