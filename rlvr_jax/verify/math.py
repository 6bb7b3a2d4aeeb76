"""Math answers: extraction from a completion and equivalence with the gold answer.

Extraction, in order: the last top-level `\\boxed{...}` (balanced braces; an unclosed last box,
as in a completion cut at its token budget, is no answer, never the last number of the text:
`\\boxed{5, 6` is not read as 6), the text after the last `####`, the last number in the text.
Equivalence uses `math-verify` (numbers, fractions, percentages, symbolic expressions, sets and
intervals), then a stricter exact check where math-verify is known to be loose: when both
sides parse to plain numbers, they must be equal as numbers to a relative 1e-6 at 50 digits
(math-verify's absolute tolerance accepts e.g. 1/2^99 vs 1/2^98: both round to 0).

Looseness closed here, before math-verify sees the answer: an answer with more top-level items
than the gold (`x=5, y=\\text{anything}` for gold `5`: math-verify keeps the first equation and
drops the rest) or with more than one percent sign (`5\\%\\%\\%`) is WRONG.

An answer is read whole or not at all. math-verify reads what it can: when the LaTeX parser
rejects an answer it falls back to the first number or expression it finds in the text, so
`12 \\lor 7`, `12~7`, `12 \\\\ 7`, `12\\text{, }7` or `12\\cancel{7}7` each passed for one of
its two values, and `0.\\overline{3}` passed for 0. Here the answer's LaTeX must parse as one
expression (only a plain number such as `50\\%` takes math-verify's number reader). Also WRONG:
a box inside the answer (math-verify keeps the inner box), two numbers side by side (`5 6`,
read as 5 + 6), more equals signs than the gold has, or two when it has none (`x=2 x=3` is read
as the chain x = 2x = 3 and judged by its last part), a false equation between numbers
(`12 = 7`, read as 7) or one whose left side names nothing when the gold is no equation
(`28x = 23`, read as 23), an approximation that is neither a name and its value nor two numbers
within 1% (`12 \\approx 7`, read as 12: the parser keeps one side), a subscript on a number
when the gold has none (`10_{20}`, read as 10; `1011_2` stays a base when the gold writes one),
infinity when the gold has none (sympy computes with it: `5 + \\frac{1}{\\infty}` is read
as 5), a number or a second answer inside a text block beside the rest of the answer
(`5\\text{ or 6}`, `x^2\\text{ or x^3}`: text is dropped as a unit; a unit's power,
`\\mathrm{m/s^2}`, is no number), digits that math-verify's normalized text lost (a trailing
text block goes with all after its start: `\\sqrt{2}\\mbox{ or }\\sqrt{3}` read as the first
root), a symbol made of text (`0\\text{ i.e. }1`: 0 * `i.e.` * 1) or a symbol times zero where
the gold is a number (`0\\hfill 1`: 0 * l * 1), and numbers side by side
across markup that shows nothing or a parenthesized number (`0\\phantom{1}`, `0\\,(1)`: 01).
The rules on the text look at the answer as written and as math-verify normalizes it
(`\\displaystyle` dropped). Digit groups spaced with `\\,`, `~` or a space (`1\\,000`, read as
1 * 0) are joined first, and a repeating decimal becomes its exact fraction (`0.\\overline{3}`,
`0.\\bar{3}`, `0.\\dot{3}`, `0.(3)`, which math-verify does not read), in the gold too. A number
trailed by an ellipsis (`0.3\\ldots`, read as 0.3) is WRONG unless the gold has an ellipsis.
Rewritten first, on both sides: a box that is the whole answer is unwrapped, a number and its
unit in one text block (`\\text{2 hours}`, which the parser drops whole) or in plain lowercase
words (`18 dollars`; a word the parser reads as maths, `5 pi`, stays) is read as
`2\\text{ hours}`, the values of one unknown (`x=2, x=-2`) as values, `\\varnothing` as
`\\emptyset`; a gold set may be answered as its elements
(`1, 2, 3` for `\\{1,2,3\\}`) and a ± as both values (`2, -2` for `\\pm 2`).

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
from rlvr_jax.verify.math_text import (ALTERNATIVE, CURRENCY, GAP, as_written, group_end,
                                       items_allowed, join_groups, last_box, top_level_items)

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
MAX_ANSWER_CHARS = 1000
TIMEOUT_S = 2  # math-verify takes whole seconds; an honest answer takes milliseconds
# Markup that shows nothing, or boxes its argument away: `0\\phantom{1}` was read as 01 = 1
_HIDDEN = (r"\\(?:[hv]?phantom|[hv]box|mbox|smash|m(?:ath)?[rlc]lap|[rl]lap|[hv]fill?"
           r"|(?:neg)?(?:thin|med|thick)space|enspace|hspace\*?|kern|mkern|mspace)(?![a-zA-Z])"
           r"\s*(?:-?[\d.]+\s*[a-z]{2})?(?:\{(?:[^{}]*\})?)?|\\\$")  # 0\\$5: normalized to 05
# 5 6, 5(6), 5\\phantom{x}6: math-verify reads 5 + 6, as a mixed number
_SIDE_BY_SIDE = re.compile(r"\d(?:" + GAP + r"|" + _HIDDEN + r")+\.?\d"
                           r"|\d(?:" + GAP + r")?\((?:" + GAP + r")?-?[\d.]+(?:" + GAP + r")?\)")
# one number, with a currency, percent or degree sign or a full stop: math-verify's number reader
_PLAIN_NUMBER = re.compile(r"\s*" + CURRENCY + r"?\s*[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)\s*"
                           r"(?:\\?%|°|" + CURRENCY + r")?\s*\.?\s*")
_EQUALS = re.compile(r"(?<![\\<!>])=")  # as math-verify splits a chain of equations
_DOLLAR = re.compile(r"(?<!\\)\$")
_ELLIPSIS = re.compile(r"\\[lc]?dots|\.\.\.|…")
_NUMBER_ELLIPSIS = re.compile(r"\d\s*(?:\\[lc]?dots|\.\.\.|…)")
_APPROX = re.compile(r"\\(?:approx|simeq|sim|cong|doteq)")  # \\approxe: the parser reads \\approx
_NUMBER_SUBSCRIPT = re.compile(r"\d\s*}?\s*_")
_INFINITY = re.compile(r"\\infty|∞|\boo\b")  # sympy computes with it: 5 + 1/oo is 5
# Text in an answer: math-verify drops it as a unit or a remark, whatever it holds
_TEXT = re.compile(r"\\(?:text(?:rm|bf|it|tt|sf|up|normal)?|mbox|hbox|emph|operatorname"
                   r"|math(?:rm|bf|it|sf|tt))\s*\{")
_UNIT_POWER = re.compile(r"\^\s*\{?\s*\d+")  # m/s^2, cm^{3}: a unit's power, no number
_UNIT_POWER_AFTER = re.compile(r"\s*\{?\s*\^\s*\{?\s*\d+\s*\}?\s*\}?")  # \\text{ cm}^{3}
# What in a text block's words is maths: a lone letter (`or x^3`), a power, a command
_MATH_IN_TEXT = re.compile(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])|\^|\\[A-Za-z]|\$")
_HALF = re.compile(r"\s*0?\.5\s*")
_SYMBOL_NAME = re.compile(r"[\w{}+\-'^]+")  # x_1, a_{n+1}, vec{v}; not `,` or `i.e.`
APPROX_RTOL = 1e-2


def _text_blocks(answer: str):
    """(start, end, content) of each top-level text block (`\\text{...}`, `\\mathrm{...}`, ...),
    nested braces included."""
    pos = 0
    while m := _TEXT.search(answer, pos):
        end = group_end(answer, m.end())
        inside = answer[m.end():end - 1] if end else answer[m.end():]
        pos = end or len(answer)
        yield m.start(), pos, inside


def _text_beside(answer: str) -> str | None:
    """Why a text block beside the rest of the answer is no unit or separator, or None. The
    parser drops text (as a unit), and with a trailing text block everything after its start:
    `5\\text{ or 6}` was read as 5, `x^2\\text{ or x^3}` as x^2. A unit's power is no number
    (`\\mathrm{m/s^2}`); a text block that is the whole answer (`\\text{5}`) is read; one that
    only separates (`1 \\text{ and } 2`: a list) is counted as such."""
    for start, end, inside in _text_blocks(answer):
        if not (answer[:start] + answer[end:]).strip():
            continue
        if re.search(r"\d", _UNIT_POWER.sub("", inside)):
            return "a number inside text, which the parser drops"
        if ALTERNATIVE.search(inside) and _MATH_IN_TEXT.search(ALTERNATIVE.sub("", inside)):
            return "text that states another answer beside the words joining it"
    return None


def _outside_text(answer: str) -> str:
    """The answer without its text blocks (and a unit's power after one: `\\text{ cm}^{3}`)."""
    out, pos = [], 0
    for start, end, _ in _text_blocks(answer):
        out.append(answer[pos:start])
        power = _UNIT_POWER_AFTER.match(answer, end)
        pos = power.end() if power else end
    return "".join(out) + answer[pos:]


def _percent_signs(answer: str) -> int:
    return answer.count("%")  # \\% counts once: its backslash is no percent sign


def last_boxed(text: str) -> str | None:
    """Content of the last top-level box (see `last_box`); None if absent or unclosed."""
    box = last_box(text)
    return box[0] if box and box[1] else None


def extract_answer(text: str) -> str | None:
    """The final answer of a completion or a reference solution (see module docstring)."""
    box = last_box(text)
    if box is not None:
        return box[0] if box[1] else None  # unclosed: no answer, not the text's last number
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else None
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def _parse(answer: str, *, whole: bool = False):
    """math-verify's parse, as [sympy object, string] or []. whole: the answer's LaTeX must
    parse as one expression (no fallback to a number found in the text), save a plain number."""
    from math_verify import LatexExtractionConfig, parse

    # Wrapped in $...$ so LaTeX answers (fractions, sets, intervals) parse as LaTeX; a plain
    # number parses either way. A first attempt that ran into the timeout is not retried.
    t0 = time.perf_counter()
    kinds = {"extraction_config": [LatexExtractionConfig()]} if whole else {}
    parsed = parse(f"${answer}$", parsing_timeout=TIMEOUT_S, **kinds)
    if whole and parsed and isinstance(parsed[0], str):
        parsed = []  # the LaTeX did not parse: math-verify hands its text back
    if parsed or time.perf_counter() - t0 >= 0.9 * TIMEOUT_S:
        return parsed
    if whole and not _PLAIN_NUMBER.fullmatch(answer):
        return []
    return parse(answer, parsing_timeout=TIMEOUT_S)


def _read_partly(pred: str, gold: str) -> str | None:
    """Why math-verify would read only part of a (grouped, dollar-free) answer; None if it
    reads it whole as far as the text shows."""
    if "\\boxed" in pred or "\\fbox" in pred:
        return "a box inside the answer"
    if _SIDE_BY_SIDE.search(pred):
        return "two numbers side by side"
    if _NUMBER_SUBSCRIPT.search(pred) and "_" not in gold:
        return "a subscript on a number that the gold answer does not have"
    if _INFINITY.search(pred) and not _INFINITY.search(gold):
        return "infinity, which the gold answer does not have"
    if _NUMBER_ELLIPSIS.search(pred) and not _ELLIPSIS.search(gold):
        return "a number trailed by an ellipsis (no exact value; the parser drops it)"
    return _text_beside(pred) if not _text_beside(gold) else None


def _dropped(pred: str, written: str) -> str | None:
    """Why the parser's text (`written`, math-verify's normalized extraction) lost part of the
    answer, or None: its digits must hold the answer's, in order, outside text blocks
    (`\\sqrt{2}\\mbox{ or }\\sqrt{3}` was read as its first root; the normalization drops a
    trailing text block and everything after its start). A plain number is read by itself."""
    if _PLAIN_NUMBER.fullmatch(pred):
        return None
    if written.strip() == "\\frac{1}{2}" and _HALF.fullmatch(_outside_text(pred)):
        return None  # the normalization writes a lone 0.5 (a unit's text removed) as 1/2
    have = iter(re.sub(r"\D", "", written))
    if all(d in have for d in re.sub(r"\D", "", _outside_text(pred))):  # a subsequence
        return None
    return "part of the answer that the parser drops"


def _stray_symbols(answer, gold) -> str | None:
    """Why the parsed answer holds a symbol it should not, or None: text the parser read as a
    name (`0\\text{ i.e. }1` is the product 0 * `i.e.` * 1, which is 0), or a symbol times
    zero, where the gold is a number (`0\\hfill 1`: 0 * l * 1; `\\sin^2 x + \\cos^2 x` stays 1)."""
    import sympy

    if isinstance(answer, sympy.Symbol) and _PLAIN_NUMBER.fullmatch(str(answer)):
        return None  # `\\text{5}`: a number written as text, compared as math-verify does
    if not isinstance(answer, sympy.Basic):
        return None
    named = getattr(gold, "free_symbols", set())  # `\\text{A, C}` for the same gold is its own
    if any(not _SYMBOL_NAME.fullmatch(str(s)) and s not in named for s in answer.free_symbols):
        return "text read as a symbol"
    if getattr(gold, "is_number", False) and any(
            isinstance(e, sympy.Mul) and e.free_symbols and any(a == 0 for a in e.args)
            for e in sympy.preorder_traversal(answer)):
        return "a symbol times zero where the gold answer is a number"
    return None


def _names(expr) -> bool:
    """Whether an expression only names something: x, x_1, AB (a * b), f(x)."""
    from sympy.core.function import AppliedUndef

    return bool(getattr(expr, "is_Symbol", False) or isinstance(expr, AppliedUndef)
                or (getattr(expr, "is_Mul", False) and all(_names(a) for a in expr.args)))


def _loose_approximation(text: str) -> str | None:
    """Why `a \\approx b` is no answer: the parser keeps b when a only names something
    (`x \\approx 3.14`), else a, dropping b, so b must then be a number within APPROX_RTOL."""
    sides = _APPROX.split(text, maxsplit=1)
    if len(sides) < 2:
        return None
    lhs, rhs = (_parse(s, whole=True) for s in sides)
    if not lhs or not rhs:
        return "a side of an approximation that does not parse"
    a, b = lhs[0], rhs[0]
    if getattr(a, "is_number", False) and getattr(b, "is_number", False):
        if not _numbers_differ(a, b, rtol=APPROX_RTOL):
            return None
    elif _names(a):
        return None
    return "an approximation that is neither a name and its value nor numbers within 1%"


def _false_equation(parsed, gold_is_equation: bool) -> str | None:
    """Why a parsed answer states what is not so (`12 = 7`) or is an equation read as its right
    side although its left side names nothing (`28x = 23`, for a gold that is no equation);
    None if neither."""
    import sympy

    eqs = parsed.args if isinstance(parsed, sympy.And) else (parsed,)
    for eq in eqs:
        if not isinstance(eq, sympy.Eq):
            continue
        if all(s.is_number for s in eq.args):
            if _numbers_differ(*eq.args):
                return "a false equation between numbers"
        elif not gold_is_equation and not _names(eq.lhs):
            return "an equation whose left side is no name, read as its right side"
    return None


def _numbers_differ(a, b, rtol: float = 1e-6) -> bool:
    """Whether two sympy numbers differ past a relative rtol at 50 digits; False when they
    cannot be compared as numbers (math-verify's verdict stands) or take over TIMEOUT_S."""
    import sympy
    from math_verify.utils import TimeoutException, timeout

    @timeout(TIMEOUT_S)
    def differ():
        x, y = sympy.N(a, 50), sympy.N(b, 50)
        if not (x.is_finite and y.is_finite):
            return x != y
        return not bool(abs(x - y) <= rtol * max(abs(x), abs(y)))

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
    gold, pred = as_written(gold), as_written(pred)
    if top_level_items(pred) > items_allowed(gold):
        return False, "more items than the gold answer"
    if _percent_signs(pred) > max(1, _percent_signs(gold)):
        return False, "repeated percent signs"
    if len(_EQUALS.findall(pred)) > max(1, len(_EQUALS.findall(gold))):
        return False, "more equals signs than the gold answer"
    pred = join_groups(_DOLLAR.sub("", pred))
    partly = _read_partly(pred, gold)
    if partly:
        return False, partly
    g, p = _parse(join_groups(gold)), _parse(pred, whole=True)
    if not g or not p:
        return False, "unparsed"
    written = p[1] if isinstance(p[1], str) else pred  # as math-verify normalized it
    false = (_read_partly(written, gold) or _dropped(pred, written)
             or _stray_symbols(p[0], g[0]) or _loose_approximation(written)
             or _false_equation(p[0], isinstance(g[0], (sympy.Eq, sympy.And))))
    if false:
        return False, false
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
    try:
        ok, how = equivalent(gold, pred)
    finally:
        _forget()
    status = Status.PASS if ok else Status.WRONG
    return Verdict(status, f"expected {gold!r}, got {pred!r}: {how}", time.perf_counter() - t0)


def _forget() -> None:
    """Drop what sympy and math-verify cached for this answer. Their caches kept each answer's
    numbers: `2^{30000000}` (4 MB) grew a worker by 15 MB a time, so a few hundred such answers
    would fill its address space and the answers after them would fail on it. Answers are
    mostly distinct, so the caches saved little (a repeated job hits the pool's verdict cache)."""
    from math_verify import parser
    from sympy.core import intfunc
    from sympy.core.cache import clear_cache

    clear_cache()
    cached = [getattr(parser, name, None)
              for name in ("extract_latex", "parse_latex_cached", "parse_expr_cached")]
    for f in cached + [getattr(intfunc, "igcd", None)]:  # igcd keeps 1024 pairs of integers
        getattr(f, "cache_clear", lambda: None)()
