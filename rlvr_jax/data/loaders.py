"""Prompt datasets from local JSONL or Parquet files, in the formats the field uses:

  gsm8k   {"question": str, "answer": "... #### 42"}
  math    {"problem": str, "solution": "... \\boxed{42} ..."}       (MATH / Hendrycks)
  verl    {"data_source": str, "prompt": [{"role": ..., "content": ...}, ...],
           "reward_model": {"ground_truth": str, ...}}             (verl's RL parquet rows)

`format="auto"` picks the format per row from its keys. A malformed row raises a DatasetError
naming the file and line (1-based; the row number for Parquet), or, with `on_error="skip"`,
is skipped and counted.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterator

from rlvr_jax.verify.math import extract_answer, last_boxed

FORMATS = ("auto", "gsm8k", "math", "verl")


class DatasetError(ValueError):
    """A dataset file or row is unusable; the message names the file and line."""


@dataclass(frozen=True)
class Problem:
    """One prompt with its reference answer. `messages` is a chat (role/content dicts)."""

    uid: str  # "<file>:<line>"
    messages: tuple  # ((role, content), ...)
    answer: str  # gold final answer, as text
    data_source: str


def read_rows(path: str) -> Iterator[tuple[int, object]]:
    """(line number, parsed row) for a .jsonl / .json-lines or .parquet file."""
    if not os.path.exists(path):
        raise DatasetError(f"{path}: file not found")
    if os.path.isdir(path):
        raise DatasetError(f"{path}: is a directory, not a data file (a .jsonl or .parquet "
                           "file: the split's own file, e.g. train.jsonl)")
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as e:
            raise DatasetError(f"{path}: cannot read as Parquet ({e})") from e
        for i, row in enumerate(table.to_pylist(), start=1):
            yield i, row
        return
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as e:
                yield i, DatasetError(f"{path}:{i}: not valid JSON ({e.msg})")
            except RecursionError:
                yield i, DatasetError(f"{path}:{i}: JSON nested too deeply")


def _detect(row: dict) -> str:
    if "reward_model" in row and "prompt" in row:
        return "verl"
    if "question" in row and "answer" in row:
        return "gsm8k"
    if "problem" in row and "solution" in row:
        return "math"
    raise ValueError(f"cannot tell the format from its keys {sorted(row)[:6]} (expected "
                     "question/answer, problem/solution or data_source/prompt/reward_model)")


def json_object(row: object, where: str) -> dict:
    """The row as a dict, or the DatasetError that says why it is not one."""
    if isinstance(row, DatasetError):
        raise row
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {type(row).__name__}")
    return row


def row_error(e: Exception, where: str) -> DatasetError:
    """A parse failure as the row's one-line error (a missing key named as such)."""
    what = f"missing field {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
    return DatasetError(f"{where}: {what}")


def parse_row(row: object, fmt: str, where: str, default_source: str) -> Problem:
    row = json_object(row, where)
    try:
        fmt = _detect(row) if fmt == "auto" else fmt
        if fmt == "gsm8k":
            if "####" not in str(row["answer"]):
                raise ValueError("'answer' has no '#### <final answer>'")
            gold = str(row["answer"]).rsplit("####", 1)[1].strip().replace(",", "")
            messages = (("user", str(row["question"])),)
            source = row.get("data_source", default_source)
        elif fmt == "math":
            gold = last_boxed(str(row["solution"]))
            if gold is None:
                raise ValueError("'solution' has no \\boxed{...} answer")
            messages = (("user", str(row["problem"])),)
            source = row.get("data_source", row.get("type", default_source))
        elif fmt == "verl":
            prompt = row["prompt"]
            if isinstance(prompt, str):
                prompt = json.loads(prompt)
            messages = tuple((str(m["role"]), str(m["content"])) for m in prompt)
            gold = row["reward_model"]["ground_truth"]
            gold = extract_answer(str(gold)) if "####" in str(gold) else str(gold)
            source = str(row["data_source"])
        else:
            raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
        raise row_error(e, where) from None
    if not messages or not gold:
        raise DatasetError(f"{where}: empty prompt or answer")
    return Problem(where, messages, str(gold), str(source))


def load(path: str, fmt: str = "auto", on_error: str = "raise") -> tuple[list[Problem], int]:
    """(problems, number of skipped rows). `on_error`: raise | skip."""
    return load_rows(path, lambda row, where, source: parse_row(row, fmt, where, source),
                     on_error)


def load_rows(path: str, parse, on_error: str = "raise") -> tuple[list, int]:
    """(parsed rows, number skipped) of a JSONL / Parquet file: `parse(row, "file:line",
    default data source)` raises DatasetError on a bad row, which stops the load or, with
    `on_error="skip"`, is counted."""
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be raise or skip, got {on_error!r}")
    default_source = os.path.splitext(os.path.basename(path))[0]
    out, skipped = [], 0
    for line, row in read_rows(path):
        try:
            out.append(parse(row, f"{path}:{line}", default_source))
        except DatasetError:
            if on_error == "raise":
                raise
            skipped += 1
    if not out:
        raise DatasetError(f"{path}: no usable rows ({skipped} skipped)")
    return out, skipped
