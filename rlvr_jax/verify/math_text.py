"""How a math answer is written, before the parser reads it (verify/math.py): the box it sits
in, the items it lists, and what is rewritten on both sides so that the parser reads what was
meant: spaced digit groups joined (`1\\,000`), repeating decimals as fractions, a box that is
the whole answer unwrapped, a number and its unit words (`\\text{2 hours}`, `18 dollars`) as
the number and a unit, `\\varnothing` as `\\emptyset`. Linear in the text (a completion's
boxes are found in one scan)."""

from __future__ import annotations

import re

_BOX = re.compile(r"\\(?:boxed|fbox)\{")
_OPEN, _CLOSE = "([{", ")]}"
# 1,000 and 1,\\!000 (the MATH dataset's thousands): one number, not two items
_DIGIT_GROUP = re.compile(r"(?<=\d),(?:\s*\\!)?(?=\d{3}(?!\d))")
GAP = r"(?:\s|~|\\[,;:! ]|\\q?quad(?![a-zA-Z]))+"
# 1\,000 or 12 345 678: groups of three after a 1-3 digit head that is no exponent or index
_SPACED_GROUPS = re.compile(r"(?<![\w^_.\\])\d{1,3}(?:" + GAP + r"\d{3})+(?!\d)")
CURRENCY = r"(?:\\?\$|€|£|¥)"
# A repeating decimal, digits only, its repeating tail marked: 0.\overline{3}, 1.2\bar{34},
# 0.1\dot{6} (one digit), 0.(3)
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)(?:\\(?:overline|bar)\s*(?:\{(\d{1,100})\}|(\d))"
                        r"|\\dot\s*(?:\{(\d)\}|(\d))|\((\d{1,100})\))(?![\d.])")
# Words that join two answers (`\\text{ or }`: math-verify reads a list, counted by its items)
ALTERNATIVE = re.compile(r"(?<![A-Za-z])(?:or|and|not|nor|either|else|otherwise|i\.?e\.?"
                         r"|e\.?g\.?|maybe|perhaps|possibly|probably|vs\.?|versus|instead"
                         r"|rather)(?![A-Za-z])", re.I)
# `\\text{2 hours}`, `\\mathrm{6\\ ways}`, `\\text{\\$18.00}`: a number (and its unit words)
# written as one text block, read as the number and its unit (`2\\text{ hours}`); words that
# join answers (`\\text{2 or 3}`) are no unit
_TEXT_SPACE = r"(?:\s|~|\\[ ,;:])"
_NUMBER_AND_UNIT_TEXT = re.compile(
    r"\s*\\(?:text(?:rm|normal)?|mbox|mathrm)\s*\{" + _TEXT_SPACE + r"*(" + CURRENCY
    + r"?\s*-?(?:\d[\d,]*(?:\.\d+)?|\.\d+))(?:" + _TEXT_SPACE + r"+([A-Za-z](?:[A-Za-z.'/]|"
    + _TEXT_SPACE + r")*)|" + _TEXT_SPACE + r"*)\}\s*")
# `18 dollars`, `#### 18 apples.`: a number and lowercase unit words with no markup, read as
# `18\\text{ dollars}`; a word the parser reads as maths (`5 pi`, `2 sin`) is no unit
_SHORT_UNITS = r"(?:km|cm|mm|kg|mg|ml|ft|yd|oz|lb|hr|mi|sq)"
_NUMBER_AND_WORDS = re.compile(r"\s*(" + CURRENCY + r"?\s*-?(?:\d[\d,]*(?:\.\d+)?|\.\d+))"
                               r"\s+((?:[a-z]{3,}|" + _SHORT_UNITS
                               + r")(?:\s+[a-z]{2,})*)\s*\.?\s*")
_MATH_WORDS = re.compile(r"(?<![a-z])(?:pi|sin|cos|tan|cot|sec|csc|sinh|cosh|tanh|arc[a-z]+|log|"
                         r"ln|lg|exp|max|min|sup|inf|lim|gcd|lcm|deg|det|mod|bmod|dim|ker|arg"
                         r"|sqrt|frac|cdot|times|infty|oo)(?![a-z])")
# one equation of a list: an unknown (a letter, maybe indexed: x_1, x_{2}) and its value
_EQUATION = re.compile(r"\s*([A-Za-z])(?:_\{?\w+\}?)?\s*=\s*([^=]*[^=\s])\s*")
_WHOLE_BOX = re.compile(r"\s*\\(?:boxed|fbox)\s*\{")
# a set may be answered as its elements (`\\{1,2,3\\}`: `1, 2, 3`), a ± as both values
_SET = re.compile(r"\s*(?:\\left)?\\\{(.*?)(?:\\right)?\\\}\s*", re.S)
_PLUS_MINUS = re.compile(r"\\(?:pm|mp)(?![a-zA-Z])|±|∓")
_SYNONYMS = [(re.compile(r"\\varnothing(?![a-zA-Z])|∅"), r"\\emptyset ")]


def last_box(text: str) -> tuple[str, bool] | None:
    """(content, closed) of the last top-level \\boxed{...} or \\fbox{...}: a box inside it is
    part of its content, and escaped braces (`\\{`) do not count. Unclosed: (the rest of the
    text, False). None if there is no box."""
    found, pos = None, 0
    while True:
        # one scan for both names: a find per name rescanned the text to its end per box
        # when one name was absent (100k boxes: quadratic, a worker's deadline spent)
        start = _BOX.search(text, pos)
        if start is None:
            return found
        i = start.end()
        j = group_end(text, i)
        if j is None:
            return text[i:].strip(), False
        found, pos = (text[i: j - 1].strip(), True), j


def group_end(text: str, i: int) -> int | None:
    """The index after the brace that closes the group opened just before `i` (escaped
    characters such as `\\{` skipped), or None if it is never closed."""
    depth = 1
    while i < len(text) and depth:
        if text[i] == "\\":
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return None if depth else i


def top_level_items(answer: str) -> int:
    """Items of a comma / semicolon separated answer, counted outside brackets and braces
    (`(1, 2)` is one item, `x=5, y=3` two); digit-group commas and LaTeX's `\\,` are no
    separators."""
    return len(_top_level_parts(answer))


def _top_level_parts(answer: str) -> list[str]:
    """The items `top_level_items` counts (digit groups joined, `\\,` and `\\;` as spaces)."""
    text = _DIGIT_GROUP.sub("", answer.replace("\\,", " ").replace("\\;", " "))
    depth, parts, start = 0, [], 0
    for i, c in enumerate(text):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth = max(depth - 1, 0)
        elif c in ",;" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _values_of_one_name(answer: str) -> str | None:
    """`x=2, x=-2` (or `x_1 = 2, x_2 = -2`) as `2, -2`: the values a list of equations gives
    one unknown; None for anything else (`x=2, y=3` is a point, not two values)."""
    parts = _top_level_parts(answer)
    eqs = [_EQUATION.fullmatch(part) for part in parts]
    if len(parts) < 2 or not all(eqs) or len({e.group(1) for e in eqs}) != 1:
        return None
    return ", ".join(e.group(2) for e in eqs)


def as_written(answer: str) -> str:
    """The answer with what the parser misreads rewritten: a box that is the whole answer
    (`\\boxed{\\boxed{6}}`) unwrapped, a number and its unit in one text block (`\\text{2
    hours}`: the parser drops the block, number and all) or in plain words (`2 hours`) as
    `2\\text{ hours}`, a list of equations of one unknown as its values (`x=2, x=-2` as
    `2, -2`), symbols it does not know (`\\varnothing`) as the ones it does. Any other answer
    as it is."""
    while (m := _WHOLE_BOX.match(answer)) and group_end(answer, m.end()) == len(answer.rstrip()):
        answer = answer.rstrip()[m.end():-1]
    for pattern, name in _SYNONYMS:
        answer = pattern.sub(name, answer)
    values = _values_of_one_name(answer)
    if values is not None:
        return values
    m = _NUMBER_AND_UNIT_TEXT.fullmatch(answer) or _NUMBER_AND_WORDS.fullmatch(answer)
    if m is None or (m.group(2) and (ALTERNATIVE.search(m.group(2))
                                     or _MATH_WORDS.search(m.group(2)))):
        return answer
    words = re.sub(_TEXT_SPACE + "+", " ", m.group(2) or "").strip()
    return f"{m.group(1)}\\text{{ {words}}}" if words else m.group(1)


def items_allowed(gold: str) -> int:
    """How many top-level items an answer to `gold` may list: the gold's, or its set's
    elements, and one more per ± (`\\pm 2`: `2, -2`)."""
    inner = _SET.fullmatch(gold)
    items = max(top_level_items(gold), top_level_items(inner.group(1)) if inner else 1)
    return items + len(_PLUS_MINUS.findall(gold))


def join_groups(answer: str) -> str:
    """Spaced digit groups joined, and repeating decimals as fractions (math-verify reads
    neither: `1\\,000` as 1 * 0, `0.\\overline{3}` not at all)."""
    return _REPEATING.sub(_as_fraction, _SPACED_GROUPS.sub(
        lambda m: re.sub(r"\D", "", m.group()), answer))


def _as_fraction(m: re.Match) -> str:
    """`I.A\\overline{R}` = (IAR - IA) / (10^|A| (10^|R| - 1)), exactly."""
    whole, fixed = m.group(1) or "0", m.group(2)
    repeat = next(g for g in m.groups()[2:] if g)
    num = int(whole + fixed + repeat) - int(whole + fixed)
    return f"\\frac{{{num}}}{{{10 ** len(fixed) * (10 ** len(repeat) - 1)}}}"
