"""Math answers: extraction from a completion and equivalence with the gold answer.

Extraction, in order: the last `\\boxed{...}` (balanced braces), the text after the last
`####`, the last number in the text. Equivalence uses `math-verify` (numbers, fractions,
percentages, symbolic expressions, sets and intervals), then a stricter exact check where
math-verify is known to be loose: when both sides parse to plain numbers, they must be equal as
numbers to a relative 1e-6 at 50 digits (math-verify's absolute tolerance accepts e.g.
1/2^99 vs 1/2^98: both round to 0).

`check` calls math-verify, whose timeouts use `signal.alarm`: run it in a worker process's
main thread (see `pool.py`), never in a trainer thread.
"""

from __future__ import annotations

import re
import time

from rlvr_jax.types import Status, Verdict

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


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
    # number parses either way.
    return parse(f"${answer}$") or parse(answer)


def equivalent(gold: str, pred: str) -> tuple[bool, str]:
    """(equal, how): math-verify's verdict, tightened to exact equality for plain numbers."""
    import sympy
    from math_verify import verify

    g, p = _parse(gold), _parse(pred)
    if not g or not p:
        return False, "unparsed"
    if not verify(g, p):
        return False, "math-verify: not equivalent"
    a, b = g[0], p[0]
    if isinstance(a, sympy.Basic) and isinstance(b, sympy.Basic) and a.is_number and b.is_number:
        try:
            x, y = sympy.N(a, 50), sympy.N(b, 50)
            close = bool(abs(x - y) <= 1e-6 * max(abs(x), abs(y)))
        except (TypeError, ValueError):
            close = True  # not comparable as numbers: keep math-verify's verdict
        if not close:
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
