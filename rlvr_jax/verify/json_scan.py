"""Finding JSON objects inside free text (a model's completion) in linear time.

`objects(text)` describes every position where a JSON object starts: whether an object parses
from there, where it ends, its nesting depth and whether it has a given top-level key. The
obvious way (try `json.JSONDecoder.raw_decode` from every `{`) is quadratic in the number of
braces: 50,000 of them cost seconds of host time outside any deadline. Here the starts are
scanned right to left and each scan jumps over a nested object already scanned (its result is
the same whatever encloses it: the grammar is context-free), so every character is scanned a
bounded number of times. Strings, numbers and literals are matched by regular expressions (C
speed); the structure by an explicit stack (no recursion, whatever the depth).

What is accepted is what Python's `json` module accepts (NaN and Infinity included), up to a
nesting depth of `MAX_DEPTH`: a deeper object counts as not parsing, so no parser is ever asked
to recurse past it. Standard library only.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple, Optional

MAX_DEPTH = 100

_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*"')
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null|NaN|"
                     r"Infinity|-Infinity")


class Found(NamedTuple):
    end: int  # one past the closing brace; -1: no object parses from this start
    depth: int  # nesting depth (1: no nested array or object)
    has_key: bool  # the object has the requested top-level key


_FAIL = Found(-1, 0, False)


def _scan(text: str, start: int, key: str, memo: dict) -> Found:
    """The object starting at text[start] == "{", nested objects looked up in `memo`."""
    stack = ["o"]  # open containers: "o" object, "a" array
    expect = "key_or_close"
    has_key, depth, i, n = False, 1, start + 1, len(text)
    while True:
        i = _WS.match(text, i).end()
        if i >= n:
            return _FAIL
        c = text[i]
        if expect in ("key", "key_or_close"):
            if c == "}" and expect == "key_or_close":
                expect = "close"
                continue
            m = _STRING.match(text, i)
            if m is None:
                return _FAIL
            if len(stack) == 1 and not has_key and m.end() - i <= 6 * len(key) + 2:
                has_key = json.loads(m.group()) == key  # escapes decoded (\u0074ool)
            i, expect = m.end(), "colon"
        elif expect == "colon":
            if c != ":":
                return _FAIL
            i, expect = i + 1, "value"
        elif expect in ("value", "value_or_close"):
            if c == "]" and expect == "value_or_close":
                expect = "close"
                continue
            if c == "{":
                inner = memo.get(i, _FAIL)
                if inner.end < 0 or len(stack) + inner.depth > MAX_DEPTH:
                    return _FAIL
                depth = max(depth, len(stack) + inner.depth)
                i, expect = inner.end, "comma_or_close"
            elif c == "[":
                stack.append("a")
                if len(stack) > MAX_DEPTH:
                    return _FAIL
                depth = max(depth, len(stack))
                i, expect = i + 1, "value_or_close"
            else:
                m = _STRING.match(text, i) if c == '"' else _SCALAR.match(text, i)
                if m is None:
                    return _FAIL
                i, expect = m.end(), "comma_or_close"
        elif expect == "comma_or_close":
            if c == ",":
                i, expect = i + 1, "key" if stack[-1] == "o" else "value"
            else:
                expect = "close"
        else:  # close: the bracket that ends the innermost open container
            if c != ("}" if stack[-1] == "o" else "]"):
                return _FAIL
            stack.pop()
            i += 1
            if not stack:
                return Found(i, depth, has_key)
            expect = "comma_or_close"


def objects(text: str, key: str) -> dict[int, Found]:
    """For every "{" in `text`: what parses from it (see `Found`)."""
    memo: dict[int, Found] = {}
    for start in reversed([m.start() for m in re.finditer(r"\{", text)]):
        memo[start] = _scan(text, start, key, memo)
    return memo


def load(text: str, found: Found, start: int) -> Optional[dict]:
    """The object `found` describes, parsed; None if Python's parser still refuses it (an
    integer literal past its 4300-digit limit)."""
    try:
        obj = json.loads(text[start:found.end])
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None
