"""Prompt datasets from local files, in the formats the field uses:

  gsm8k   {"question": str, "answer": "... #### 42"}
  math    {"problem": str, "solution": "... \\boxed{42} ..."}       (MATH / Hendrycks)
  verl    {"data_source": str, "prompt": [{"role": ..., "content": ...}, ...],
           "reward_model": {"ground_truth": str, ...}}             (verl's RL parquet rows)

`format="auto"` picks the format per row from its keys. A malformed row raises a DatasetError
naming the file and line (1-based; the row number for Parquet and Arrow), or, with
`on_error="skip"`, is skipped and counted.

A data path (`data_files`) is a .jsonl, .parquet or .arrow file; a glob of them
(`/data/gsm8k/main/train-*.parquet`); a directory written by Hugging Face `datasets`'
`save_to_disk` (its state.json lists its Arrow files; a saved DatasetDict names its splits:
point at one); or a folder of one split's shards, what a dataset downloaded elsewhere is.
Read with pyarrow: `datasets` is not needed, and nothing is downloaded.
"""

from __future__ import annotations

import glob
import json
import os
import re
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


DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow")


def data_files(path: str) -> list[str]:
    """The files a data path names (module docstring), in order; a DatasetError naming the
    path and what to do when it names none, or several splits at once."""
    if any(c in path for c in "*?["):
        files = sorted(f for f in glob.glob(path) if os.path.isfile(f))
        if not files:
            raise DatasetError(f"{path}: matches no file")
        return files
    if not os.path.exists(path):
        raise DatasetError(f"{path}: file not found")
    if not os.path.isdir(path):
        return [path]
    meta = lambda name: os.path.join(path, name)
    try:
        if os.path.isfile(meta("dataset_dict.json")):
            with open(meta("dataset_dict.json")) as f:
                splits = list(json.load(f)["splits"])
            raise DatasetError(f"{path}: a saved DatasetDict with splits {', '.join(splits)}: "
                               f"name one split's directory, e.g. {meta(splits[0])}")
        if os.path.isfile(meta("state.json")):  # Dataset.save_to_disk
            with open(meta("state.json")) as f:
                files = [meta(d["filename"]) for d in json.load(f)["_data_files"]]
            missing = [f for f in files if not os.path.isfile(f)]
            if missing:
                raise DatasetError(f"{path}: state.json lists {missing[0]}, which is not there")
            return files
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{path}: an unreadable datasets directory ({type(e).__name__}: "
                           f"{e})") from None
    shards = sorted(f for f in os.listdir(path) if f.endswith(DATA_SUFFIXES)
                    and os.path.isfile(meta(f)))
    if not shards:
        raise DatasetError(f"{path}: a directory without data files (.jsonl, .parquet or "
                           ".arrow shards, or a directory written by datasets' save_to_disk)")
    splits = sorted({m.group(1) for m in (re.match(r"(.+?)-\d{5}-of-\d{5}\.", f)
                                          for f in shards) if m})
    if len(splits) > 1:
        raise DatasetError(f"{path}: holds the shards of several splits ({', '.join(splits)}): "
                           f"name one split's files, e.g. {meta(splits[0] + '-*')}"
                           f"{os.path.splitext(shards[0])[1]}")
    return [meta(f) for f in shards]


def read_rows(path: str) -> Iterator[tuple[str, object]]:
    """("file:line", parsed row) of every file the data path names (`data_files`)."""
    for file in data_files(path):
        for line, row in _file_rows(file):
            yield f"{file}:{line}", row


def _file_rows(path: str) -> Iterator[tuple[int, object]]:
    """(line number, parsed row) of a .jsonl / .json-lines, .parquet or .arrow file."""
    if path.endswith((".parquet", ".arrow")):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            if path.endswith(".parquet"):
                table = pq.read_table(path)
            else:  # datasets writes the Arrow IPC stream format; the file format also reads
                with pa.memory_map(path) as source:
                    try:
                        table = pa.ipc.open_stream(source).read_all()
                    except pa.ArrowInvalid:
                        source.seek(0)
                        table = pa.ipc.open_file(source).read_all()
        except Exception as e:
            kind = "Parquet" if path.endswith(".parquet") else "Arrow"
            raise DatasetError(f"{path}: cannot read as {kind} ({e})") from e
        for i, row in enumerate(table.to_pylist(), start=1):
            yield i, row
        return
    with open(path, "rb") as f:
        for i, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                yield i, json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                yield i, DatasetError(f"{path}:{i}: not UTF-8 text ({e.reason})")
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
    default_source = os.path.splitext(os.path.basename(os.path.normpath(path)))[0]
    out, skipped = [], 0
    for where, row in read_rows(path):
        try:
            out.append(parse(row, where, default_source))
        except DatasetError:
            if on_error == "raise":
                raise
            skipped += 1
    if not out:
        raise DatasetError(f"{path}: no usable rows ({skipped} skipped)")
    return out, skipped
