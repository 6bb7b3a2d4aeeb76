"""Fenced blocks of a completion (```lang, a line break, the body, ```), found in linear time.

The obvious pattern, "```(?:lang)?\\s*\\n(.*?)```", backtracks: after a fence that is never
closed, `\\s*\\n` retries every line break of a run of blank lines, and each retry scans the
rest of the text for a closing fence. 32,000 line breaks after one fence cost 5 s of the
trainer's host time (the code and SQL verdicts read their program on the host), 100,000 a
minute. Here the gap up to the last line break is taken once (a lookahead, which never
backtracks), so the body starts where it did and every start scans the text once at most.
"""

from __future__ import annotations

import re


def pattern(languages: tuple[str, ...], flags: int = 0) -> re.Pattern:
    """Matches a block whose info string is empty or one of `languages` (the group "lang",
    None when empty); its body is the group "body"."""
    names = "|".join(re.escape(name) for name in languages)
    return re.compile(r"```(?P<lang>" + names + r")?(?=(?P<gap>\s*\n))(?P=gap)(?P<body>.*?)```",
                      re.S | flags)


def bodies(found: re.Pattern, text: str) -> list[str]:
    """The bodies of the tagged blocks `found` matches in `text`, in order; of the bare ```
    blocks when none is tagged (an answer followed by its example input or output in a bare
    block is the answer)."""
    blocks = [(m.group("lang"), m.group("body")) for m in found.finditer(text)]
    return [body for lang, body in blocks if lang] or [body for _, body in blocks]


def last_body(found: re.Pattern, text: str) -> str | None:
    """The last of `bodies`, or None."""
    return (bodies(found, text) or [None])[-1]
