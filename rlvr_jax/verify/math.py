"""Math answers: extraction from a completion and equivalence with the gold answer.

Extraction, in order: the last `\\boxed{...}` (balanced braces), the text after the last
`####`, the last number in the text. Equivalence uses `math-verify` (numbers, fractions,
percentages, symbolic expressions, sets and intervals), then a stricter exact check where
math-verify is known to be loose: when both sides parse to plain numbers, they must be equal as
numbers to a relative 1e-6 at 50 digits (math-verify's absolute tolerance accepts e.g.
1/2^99 vs 1/2^98: both round to 0).

Looseness closed here, before math-verify sees the answer: an answer with more top-level items
than the gold (`x=5, y=\\text{anything}` for gold `5`: math-verify keeps the first equation and
drops the rest) or with more than one percent sign (`5\\%\\%\\%`) is WRONG.

Bounds: an answer over `MAX_ANSWER_CHARS` is WRONG unparsed; math-verify's parsing and
comparison each get `TIMEOUT_S` (its default is 5 s: a handful of adversarial answers such as
`10^{10^{10}}` each cost a worker 5 s), and so does our own numeric check. `check` calls
math-verify, whose timeouts use `signal.alarm`: run it in a worker process's main thread (see
rlvr_jax/sandbox/pool.py), never in a trainer thread.
"""

from __future__ import annotations

import re
import time

from rlvr_jax.types import Status, Verdict

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
MAX_ANSWER_CHARS = 1000
TIMEOUT_S = 2  # math-verify takes whole seconds; an honest answer takes milliseconds
_OPEN, _CLOSE = "([{", ")]}"
_DIGIT_GROUP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # 1,000: one number, not two items


def top_level_items(answer: str) -> int:
    """Items of a comma / semicolon separated answer, counted outside brackets and braces
    (`(1, 2)` is one item, `x=5, y=3` two); digit-group commas and LaTeX's `\\,` are no
    separators."""
    text = _DIGIT_GROUP.sub("", answer.replace("\\,", " ").replace("\\;", " "))
    depth, items = 0, 1
    for c in text:
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth = max(depth - 1, 0)
        elif c in ",;" and depth == 0:
            items += 1
    return items


def _percent_signs(answer: str) -> int:
    return answer.count("%")  # \\% counts once: its backslash is no percent sign


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} or \\fbox{...}, braces balanced; None if absent."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i: j - 1].strip() if depth == 0 else None


def extract_answer(text: str) -> str | None:
    """The final answer of a completion or a reference solution (see module docstring)."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else None
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def _parse(answer: str):
    from math_verify import parse

    # Wrapped in $...$ so LaTeX answers (fractions, sets, intervals) parse as LaTeX; a plain
    # number parses either way. A first attempt that ran into the timeout is not retried.
    t0 = time.perf_counter()
    parsed = parse(f"${answer}$", parsing_timeout=TIMEOUT_S)
    if parsed or time.perf_counter() - t0 >= 0.9 * TIMEOUT_S:
        return parsed
    return parse(answer, parsing_timeout=TIMEOUT_S)


def _numbers_differ(a, b) -> bool:
    """Whether two sympy numbers differ past a relative 1e-6 at 50 digits; False when they
    cannot be compared as numbers (math-verify's verdict stands) or take over TIMEOUT_S."""
    import sympy
    from math_verify.utils import TimeoutException, timeout

    @timeout(TIMEOUT_S)
    def differ():
        x, y = sympy.N(a, 50), sympy.N(b, 50)
        return not bool(abs(x - y) <= 1e-6 * max(abs(x), abs(y)))

    try:
        return differ()
    except (TypeError, ValueError, TimeoutException):
        return False


def equivalent(gold: str, pred: str) -> tuple[bool, str]:
    """(equal, how): math-verify's verdict, tightened to exact equality for plain numbers."""
    import sympy
    from math_verify import verify

    if len(pred) > MAX_ANSWER_CHARS:
        return False, f"answer longer than {MAX_ANSWER_CHARS} characters"
    if top_level_items(pred) > top_level_items(gold):
        return False, "more items than the gold answer"
    if _percent_signs(pred) > max(1, _percent_signs(gold)):
        return False, "repeated percent signs"
    g, p = _parse(gold), _parse(pred)
    if not g or not p:
        return False, "unparsed"
    if not verify(g, p, timeout_seconds=TIMEOUT_S):
        return False, "math-verify: not equivalent"
    a, b = g[0], p[0]
    if (isinstance(a, sympy.Basic) and isinstance(b, sympy.Basic) and a.is_number
            and b.is_number and _numbers_differ(a, b)):
        return False, "math-verify accepted, but the numbers differ (relative 1e-6)"
    return True, "equivalent"


def check(gold: str, completion: str) -> Verdict:
    """Verdict of one completion against a gold final answer."""
    t0 = time.perf_counter()
    pred = extract_answer(completion)
    if pred is None:
        return Verdict(Status.UNPARSEABLE, "no answer found", time.perf_counter() - t0)
    ok, how = equivalent(gold, pred)
    status = Status.PASS if ok else Status.WRONG
    return Verdict(status, f"expected {gold!r}, got {pred!r}: {how}", time.perf_counter() - t0)
