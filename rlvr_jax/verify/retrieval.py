"""Grounded answers: every quote the completion cites must occur in the source document, and
the answer must match.

Completion format: quotes as "..." (straight or curly double quotes) or <quote>...</quote>, and
a final `Answer: ...` line. Matching normalises case, whitespace and surrounding punctuation
and markdown (`**`, `` ` ``); the answer also drops articles, as SQuAD's exact match does (`the
mat` is `mat`). A completion with no quote is UNPARSEABLE (the task asks for evidence); one
fabricated quote makes the whole answer WRONG, whatever the answer.
"""

from __future__ import annotations

import bisect
import re
import time

from rlvr_jax.types import Status, Verdict

# Where a quote opens, and what closes each kind. Read by `_quotes`, not by the pattern
# `<quote>(.*?)</quote>|"([^"]+)"|“([^”]+)”`, which rescans the rest of the text from every
# opener that is never closed (50,000 `“` cost 8 s: quadratic).
_OPENERS = re.compile(r'<quote>|"|“')
_CLOSER = {"<quote>": "</quote>", '"': '"', "“": "”"}
_ANSWER = re.compile(r"answer\s*:\s*(.+)", re.I)


def normalize(text: str) -> str:
    """Lowercase, whitespace collapsed, punctuation and markdown (`**`, `` ` ``) off the ends."""
    return " ".join(text.lower().split()).strip(" .,;:!?'\"*`")


def _answer_key(text: str) -> str:
    """An answer as SQuAD's exact match compares it: normalized, articles dropped (`the mat`
    is `mat`); an answer that is only an article stays one."""
    text = normalize(text)
    return normalize(re.sub(r"(?<![a-z])(?:a|an|the)(?![a-z])", " ", text)) or text


def _quotes(text: str) -> list[str]:
    """The quotes, left to right as the pattern above finds them (a `<quote>` block may be
    empty, a quoted string may not), in O(n log n): each closer's positions are listed once
    and the next one after an opener is found by bisection."""
    closers = {c: [m.start() for m in re.finditer(re.escape(c), text)]
               for c in set(_CLOSER.values())}
    out, pos = [], 0
    while (m := _OPENERS.search(text, pos)) is not None:
        ends = closers[_CLOSER[m.group()]]
        k = bisect.bisect_left(ends, m.end())
        if k == len(ends) or (m.group() != "<quote>" and ends[k] == m.end()):
            pos = m.start() + 1  # not a quote here: the pattern moves on by one character
            continue
        out.append(text[m.end():ends[k]])
        pos = ends[k] + len(_CLOSER[m.group()])
    return out


def check(job: dict) -> Verdict:
    t0 = time.perf_counter()
    completion, document = job["completion"], normalize(job["document"])
    answers = _ANSWER.findall(completion)
    body = completion[: completion.lower().rfind("answer")] if answers else completion
    quotes = _quotes(body)
    if not quotes or not answers:
        return Verdict(Status.UNPARSEABLE, "needs at least one quote and an 'Answer:' line",
                       time.perf_counter() - t0)
    missing = [q for q in quotes if normalize(q) not in document or not normalize(q)]
    golds = job["answer"] if isinstance(job["answer"], list) else [job["answer"]]
    ok_answer = _answer_key(answers[-1]) in {_answer_key(g) for g in golds}
    if missing:
        return Verdict(Status.WRONG, f"quote not in the document: {missing[0][:60]!r}",
                       time.perf_counter() - t0)
    return Verdict(Status.PASS if ok_answer else Status.WRONG,
                   f"{len(quotes)} quotes found; answer {answers[-1].strip()[:40]!r} "
                   f"{'matches' if ok_answer else 'does not match'}", time.perf_counter() - t0)
