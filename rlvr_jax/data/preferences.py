"""Preference pairs (a prompt, a chosen and a rejected response) from local JSONL or Parquet
files, in the formats public preference datasets use:

  pairs   {"prompt": str | [messages], "chosen": str, "rejected": str}
  chat    {"chosen": [messages], "rejected": [messages]} (+ optional "prompt"): both
          conversations share the prompt turns and end with the assistant's answer
          (UltraFeedback-binarized, most DPO-ready sets)
  hh      {"chosen": "\\n\\nHuman: ...\\n\\nAssistant: ...", "rejected": "..."}  (Anthropic HH)

`messages` are {"role": ..., "content": ...} dicts. `format="auto"` picks the format per row.
A malformed row raises a DatasetError naming the file and line, or with `on_error="skip"` is
skipped and counted, as for prompt datasets (loaders.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlvr_jax.data.loaders import DatasetError, json_object, load_rows, row_error

FORMATS = ("auto", "pairs", "chat", "hh")


@dataclass(frozen=True)
class PreferencePair:
    uid: str  # "<file>:<line>"
    messages: tuple  # the prompt: ((role, content), ...)
    chosen: str  # the preferred response
    rejected: str
    data_source: str


def _messages(value, what: str) -> tuple:
    if isinstance(value, str):
        return (("user", value),)
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise ValueError(f"'{what}' must be a string or a list of role/content messages")
    return tuple((str(m["role"]), str(m["content"])) for m in value)


_HH_TURN = re.compile(r"\n\n(Human|Assistant):")


def _hh(text: str) -> tuple[tuple, str]:
    """Anthropic HH text -> (prompt messages, the last assistant answer)."""
    parts = _HH_TURN.split("\n\n" + text.lstrip("\n") if not text.startswith("\n\n") else text)
    turns = [(parts[i], parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]
    if not turns or turns[-1][0] != "Assistant":
        raise ValueError("does not end with an '\\n\\nAssistant:' turn")
    roles = {"Human": "user", "Assistant": "assistant"}
    return tuple((roles[r], c) for r, c in turns[:-1]), turns[-1][1]


def _detect(row: dict) -> str:
    chosen = row.get("chosen")
    if isinstance(chosen, list):
        return "chat"
    if isinstance(chosen, str) and "prompt" in row:
        return "pairs"
    if isinstance(chosen, str) and "\n\nAssistant:" in chosen:
        return "hh"
    raise ValueError(f"cannot tell the format from its keys {sorted(row)[:6]} (expected "
                     "prompt/chosen/rejected, chosen/rejected message lists, or HH text)")


def parse_row(row: object, fmt: str, where: str, default_source: str) -> PreferencePair:
    row = json_object(row, where)
    try:
        fmt = _detect(row) if fmt == "auto" else fmt
        if fmt == "pairs":
            messages = _messages(row["prompt"], "prompt")
            chosen, rejected = str(row["chosen"]), str(row["rejected"])
        elif fmt == "chat":
            c, r = _messages(row["chosen"], "chosen"), _messages(row["rejected"], "rejected")
            if not c or not r or c[-1][0] != "assistant" or r[-1][0] != "assistant":
                raise ValueError("'chosen' and 'rejected' must end with an assistant message")
            messages = _messages(row["prompt"], "prompt") if "prompt" in row else c[:-1]
            if "prompt" not in row and c[:-1] != r[:-1]:
                raise ValueError("'chosen' and 'rejected' do not share their prompt turns")
            chosen, rejected = c[-1][1], r[-1][1]
        elif fmt == "hh":
            messages, chosen = _hh(str(row["chosen"]))
            other, rejected = _hh(str(row["rejected"]))
            if other != messages:
                raise ValueError("'chosen' and 'rejected' do not share their prompt turns")
        else:
            raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    except (KeyError, TypeError, ValueError) as e:
        raise row_error(e, where) from None
    if not messages or not chosen.strip() or not rejected.strip():
        raise DatasetError(f"{where}: empty prompt or response")
    if chosen == rejected:
        raise DatasetError(f"{where}: 'chosen' and 'rejected' are the same response")
    return PreferencePair(where, messages, chosen, rejected,
                          str(row.get("data_source", default_source)))


def load(path: str, fmt: str = "auto", on_error: str = "raise"
         ) -> tuple[list[PreferencePair], int]:
    """(pairs, number of skipped rows). `on_error`: raise | skip."""
    return load_rows(path, lambda row, where, source: parse_row(row, fmt, where, source),
                     on_error)
