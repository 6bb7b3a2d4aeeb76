"""Python values across the sandbox's boundary with their types: a candidate's return values
(and the arguments it is called with) as JSON that keeps each value's type, so the host can
compare them as the dataset's own `assert f(x) == want` would.

Plain JSON erased types, and both ways it changed verdicts: `[4, 5]` passed `assert f() ==
(4, 5)`, `{'1': 2}` passed `== {1: 2}`, `{1: 'y', '1': 'x'}` passed `== {1: 'x'}` (the
decoder kept the last duplicate key); and an honest set, frozenset, bytes or complex result
failed (not serialisable), as did an int-keyed dict under a dataset's own test.

The encoding: None, bool, int, float (NaN and infinities as Python's json writes them), str and
lists are themselves; every other value is a JSON object with one key that names its type:
{"tuple": [...]}, {"set": [...]}, {"frozenset": [...]}, {"dict": [[key, value], ...]}, {"bytes":
hex}, {"complex": [real, imag]}. No JSON object stands for itself, so a returned dict cannot
pose as a tuple. A subclass travels as its base type (a namedtuple as a tuple, a Counter as a
dict: Python's `==` with the base type compares their contents), another number by its kind
(numpy's int64 as an int, a Fraction as a float); anything else is no value (TypeError). Set
elements are written in a fixed order (by their encoding), so an encoding is the same in every
process whatever its hash seed.

The host never rebuilds candidate values to compare them (`same`): a set of ints that all hash
alike costs quadratic time to build, and the candidate chooses the ints. Set elements and dict
keys are compared by a canonical text (`_key`), which hashes as a string (randomised).

Standalone, stdlib only: the sandbox's worker imports it beside itself (/opt/rlvr, bwrap.py),
the host from the package.
"""

from __future__ import annotations

import json
import math
import numbers

_TAGS = ("tuple", "set", "frozenset", "dict", "bytes", "complex")


class NotAValue(TypeError):
    """A value the encoding has no form for (a class instance, a generator, a module...)."""


def encode(value):
    """The value in the typed encoding (recursive; a cycle or a nesting past Python's recursion
    limit raises RecursionError)."""
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in dict.items(value)]}
    if isinstance(value, (set, frozenset)):
        items = sorted((encode(v) for v in value), key=lambda e: json.dumps(e))
        return {"frozenset" if isinstance(value, frozenset) else "set": items}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).hex()}
    if isinstance(value, complex):
        return {"complex": [value.real, value.imag]}
    # Other numbers by their kind, as they compare with ==: numpy's int64 (no int subclass)
    # as an int, a Fraction as a float
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, numbers.Complex):
        return encode(complex(value))
    raise NotAValue(f"a {type(value).__name__} is not a plain value (use None, bool, int, "
                    "float, complex, str, bytes, list, tuple, dict, set or frozenset)")


def decode(obj):
    """The Python value of an encoding (trusted input: arguments from the host, or the values
    a dataset's own test is replayed on inside the sandbox). ValueError when malformed."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if not (isinstance(obj, dict) and len(obj) == 1):
        raise ValueError(f"not a typed value: {type(obj).__name__}")
    (tag, body), = obj.items()
    if tag == "tuple":
        return tuple(decode(v) for v in body)
    if tag in ("set", "frozenset"):
        return (set if tag == "set" else frozenset)(decode(v) for v in body)
    if tag == "dict":
        return {decode(k): decode(v) for k, v in body}
    if tag == "bytes":
        return bytes.fromhex(body)
    if tag == "complex":
        return complex(*body)
    raise ValueError(f"unknown type tag {tag!r}")


def _tag(obj):
    """(tag, body) of an encoding: "list" and "scalar" for the untagged forms; None if
    malformed."""
    if isinstance(obj, list):
        return "list", obj
    if isinstance(obj, dict):
        if len(obj) != 1:
            return None
        (tag, body), = obj.items()
        if tag not in _TAGS or not isinstance(body, str if tag == "bytes" else list):
            return None
        if tag == "dict" and not all(isinstance(p, list) and len(p) == 2 for p in body):
            return None
        return tag, body
    return "scalar", obj


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _key(obj) -> str:
    """A canonical text of an encoding, equal for values Python's `==` and `hash` treat as one
    set element or dict key: 1 and 1.0, a set and a frozenset, dicts in any order."""
    if _number(obj):
        if isinstance(obj, float) and obj.is_integer():
            return str(int(obj))
        return repr(obj)
    tagged = _tag(obj)
    if tagged is None or tagged[0] == "scalar":
        return json.dumps(obj)
    tag, body = tagged
    if tag in ("set", "frozenset"):
        return "set{" + ",".join(sorted(set(map(_key, body)))) + "}"
    if tag == "dict":
        return "dict{" + ",".join(sorted(_key(k) + ":" + _key(v) for k, v in body)) + "}"
    if tag == "complex" and len(body) == 2 and body[1] == 0 and _number(body[0]):
        return _key(body[0])  # 2+0j == 2
    return tag + "[" + ",".join(map(_key, body) if isinstance(body, list) else [body]) + "]"


def _close(got, want, tol: float) -> bool:
    """An expected float to `tol`; an expected integer exactly, as Python's `==` (to a relative
    1e-9, 1000000008 passed for 1000000007), with no float conversion whatever its size."""
    if got == want or isinstance(want, int):
        return got == want
    try:
        return math.isclose(got, want, rel_tol=tol, abs_tol=tol)
    except OverflowError:  # an int too large for a float: it is no float near the other
        return False


def _mapping(body) -> dict | None:
    """A dict's pairs keyed by `_key`; None when two keys are one (only a forged encoding)."""
    out = {}
    for k, v in body:
        out[_key(k)] = v
    return out if len(out) == len(body) else None


def same(got, want, tol: float) -> bool:
    """Encodings equal as Python's `==` compares the values, except that an expected float (bool
    apart: it is no number here), and a float part of an expected complex number, match to
    `tol` (relative and absolute) in sequences and dict values; an expected integer is
    exact, and so are set elements and dict keys, as hashing does. Never raises: a malformed
    encoding equals nothing."""
    if _number(got) and _number(want):
        return _close(got, want, tol)
    g, w = _tag(got), _tag(want)
    if g is None or w is None:
        return False
    (gt, gb), (wt, wb) = g, w
    sets = ("set", "frozenset")
    if gt != wt and not (gt in sets and wt in sets):
        if "complex" in (gt, wt) and "scalar" in (gt, wt):  # 2 == 2+0j
            if gt == "complex":  # each part against the expected's, in that order
                return len(gb) == 2 and _number(want) and same(gb[0], want, tol) and same(
                    gb[1], 0, tol)
            return len(wb) == 2 and _number(got) and same(got, wb[0], tol) and same(
                0, wb[1], tol)
        return False
    if gt == "scalar":
        return type(gb) is type(wb) and gb == wb
    if gt in sets:
        return set(map(_key, gb)) == set(map(_key, wb))
    if gt == "dict":
        gm, wm = _mapping(gb), _mapping(wb)
        return (gm is not None and wm is not None and gm.keys() == wm.keys()
                and all(same(gm[k], wm[k], tol) for k in wm))
    if gt == "bytes":
        return gb == wb
    return len(gb) == len(wb) and all(same(a, b, tol) for a, b in zip(gb, wb))


def as_json(obj):
    """An encoding as the plain JSON that `json.dumps` of the value would give (tuples as
    lists, dict keys as strings), for expected values that came from JSON (APPS call-based
    rows: their harness compares a returned tuple as a list). NotAValue when the value has no
    JSON form (a set, bytes, a tuple key) or two of its keys become one string."""
    tagged = _tag(obj)
    if tagged is None:
        raise NotAValue("a malformed value")
    tag, body = tagged
    if tag == "scalar":
        return obj
    if tag in ("list", "tuple"):
        return [as_json(v) for v in body]
    if tag != "dict":
        raise NotAValue(f"a {tag} has no JSON form")
    out = {}
    for k, v in body:
        if isinstance(k, str):
            name = k
        elif k is None or isinstance(k, (bool, int, float)):
            name = json.dumps(k)
        else:
            raise NotAValue("a dict key that is no string or number has no JSON form")
        out[name] = as_json(v)
    if len(out) != len(body):
        raise NotAValue("two keys of the dict are one JSON key")
    return out


def show(obj, limit: int = 200) -> str:
    """Python's repr of an encoded value, cut to `limit` characters, without building it."""
    parts: list[str] = []
    budget = [limit + 1]

    def put(text: str) -> bool:
        parts.append(text[: budget[0]])
        budget[0] -= len(text)
        return budget[0] > 0

    def walk(o) -> bool:
        tagged = _tag(o)
        if tagged is None:
            return put("<malformed>")
        tag, body = tagged
        if tag == "scalar":
            try:
                return put(repr(o))
            except ValueError:  # an int past the 4300-digit conversion limit
                return put("<int too large to print>")
        if tag == "bytes":
            try:
                return put(repr(bytes.fromhex(body)))
            except (ValueError, TypeError):
                return put("<malformed>")
        if tag == "complex":
            return put(repr(complex(*body)) if len(body) == 2 and all(map(_number, body))
                       else "<malformed>")
        if tag in ("set", "frozenset") and not body:
            return put(tag + "()")
        opened = {"list": "[", "tuple": "(", "set": "{", "dict": "{", "frozenset": "frozenset({"}
        if not put(opened[tag]):
            return False
        for i, item in enumerate(body):
            if i and not put(", "):
                return False
            if tag == "dict":
                if not (walk(item[0]) and put(": ") and walk(item[1])):
                    return False
            elif not walk(item):
                return False
        closed = {"list": "]", "tuple": ",)" if len(body) == 1 else ")", "set": "}",
                  "dict": "}", "frozenset": "})"}
        return put(closed[tag])

    walk(obj)
    text = "".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."
