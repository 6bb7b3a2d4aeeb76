"""Grounded answers: every quote the completion cites must occur in the source document, and
the answer must match.

Completion format: quotes as "..." (straight or curly double quotes) or <quote>...</quote>,
and a final `Answer: ...` line. Matching normalises case, whitespace and surrounding
punctuation. A completion with no quote is UNPARSEABLE (the task asks for evidence); one
fabricated quote makes the whole answer WRONG, whatever the answer.
"""

from __future__ import annotations

import re
import time

from rlvr_jax.types import Status, Verdict

_QUOTES = re.compile(r"<quote>(.*?)</quote>|\"([^\"]+)\"|“([^”]+)”", re.S)
_ANSWER = re.compile(r"answer\s*:\s*(.+)", re.I)


def normalize(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .,;:!?'\"")


def check(job: dict) -> Verdict:
    t0 = time.perf_counter()
    completion, document = job["completion"], normalize(job["document"])
    answers = _ANSWER.findall(completion)
    body = completion[: completion.lower().rfind("answer")] if answers else completion
    quotes = [next(g for g in m if g) for m in _QUOTES.findall(body)]
    if not quotes or not answers:
        return Verdict(Status.UNPARSEABLE, "needs at least one quote and an 'Answer:' line",
                       time.perf_counter() - t0)
    missing = [q for q in quotes if normalize(q) not in document or not normalize(q)]
    golds = job["answer"] if isinstance(job["answer"], list) else [job["answer"]]
    ok_answer = normalize(answers[-1]) in {normalize(g) for g in golds}
    if missing:
        return Verdict(Status.WRONG, f"quote not in the document: {missing[0][:60]!r}",
                       time.perf_counter() - t0)
    return Verdict(Status.PASS if ok_answer else Status.WRONG,
                   f"{len(quotes)} quotes found; answer {answers[-1].strip()[:40]!r} "
                   f"{'matches' if ok_answer else 'does not match'}", time.perf_counter() - t0)
