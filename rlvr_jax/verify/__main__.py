"""Score a file of completions:

    python -m rlvr_jax.verify --kind KIND --input jobs.jsonl --output verdicts.jsonl
        [--mode fresh|forkserver] [--workers N] [--timeout S]

One JSON object a line: `id`, `completion`, and the kind's reference fields
  math: `gold` (final answer)
  code: `entry_point`, `inputs` (list of argument lists), `expected` (list of return values),
        optional `prefix` (code prepended to the completion), `tolerance` (for expected
        floats; expected integers compare exactly) and `typed` (true:
        inputs and expected in rlvr_jax/sandbox/typed_json.py's encoding, compared with
        Python's ==; else plain JSON, compared as JSON: a returned tuple counts as a list);
        or a whole program: `stdin` (list of input texts), `expected_stdout` (list of
        output texts, compared line by line, non-integer numbers to `tolerance`, default
        1e-6), optional `prefix`
  sql: `schema` (SQL script building the database), `expected` (rows), optional `ordered`
  tool: `expected` (the tool's result), optional `tools` (allowed tool names)
  logic: `premises` (formulas), optional `target` (the claim: about it, or facts beside it)
  retrieval: `document`, `answer` (string or list of accepted strings)
Each output line is {"id", "status", "detail", "latency_s", "reward"} (reward: the binary
table). A malformed line is reported on stderr with its line number and written as a
`malformed` record with that reason (and its own `id`, where it has one); every other line
is still scored.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rlvr_jax.rewards import REWARD_TABLES
from rlvr_jax.types import Status
from rlvr_jax.sandbox.pool import VerifierPool
from rlvr_jax.sandbox import typed_json
from rlvr_jax.sandbox.bwrap import SandboxUnavailable

SANDBOXED = ("code", "sql", "tool")
_STR, _NUM = (str,), (int, float)
_LIST = (list,)


def _list_of(kinds):
    return lambda v: isinstance(v, list) and all(isinstance(x, kinds) for x in v)


_PREFIX = (False, lambda v: isinstance(v, _STR), "a string")
_TOLERANCE = (False, lambda v: isinstance(v, _NUM) and not isinstance(v, bool) and v >= 0,
              "a number >= 0")
# kind -> {field: (required, check, what it must be)}
FIELDS = {
    "math": {"gold": (True, lambda v: isinstance(v, _STR + _NUM), "a string or a number")},
    "code": {"entry_point": (True, lambda v: isinstance(v, _STR), "a string"),
             "inputs": (True, _list_of(_LIST), "a list of argument lists"),
             "expected": (True, lambda v: isinstance(v, _LIST), "a list of return values"),
             "prefix": _PREFIX, "tolerance": _TOLERANCE,
             # inputs and expected in rlvr_jax/sandbox/typed_json.py's encoding, compared
             # with Python's == (a tuple is no list); else plain JSON, compared as JSON
             "typed": (False, lambda v: isinstance(v, bool), "true or false")},
    # code rows of whole programs (APPS, CodeContests): each input on stdin, outputs compared
    "code/stdin": {"stdin": (True, _list_of(_STR), "a list of input texts"),
                   "expected_stdout": (True, _list_of(_STR), "a list of output texts"),
                   "prefix": _PREFIX, "tolerance": _TOLERANCE},
    "sql": {"schema": (True, lambda v: isinstance(v, _STR), "a string (an SQL script)"),
            "expected": (True, _list_of(_LIST), "a list of rows (lists)"),
            "ordered": (False, lambda v: isinstance(v, bool), "true or false")},
    "tool": {"expected": (True, lambda v: True, "any JSON value"),
             "tools": (False, _list_of(_STR), "a list of tool names")},
    "logic": {"premises": (True, _list_of(_STR), "a list of formulas (strings)"),
              "target": (False, lambda v: isinstance(v, _STR), "a string")},
    "retrieval": {"document": (True, lambda v: isinstance(v, _STR), "a string"),
                  "answer": (True, lambda v: isinstance(v, _STR) or _list_of(_STR)(v),
                             "a string or a list of strings")},
}


def _parse(line: str, kind: str) -> dict:
    """One input line as a job, or ValueError saying what is wrong with it (nothing else: a
    line nested past the parser's recursion limit is a ValueError too)."""
    try:
        row = json.loads(line)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(row, dict):
        raise ValueError("expected a JSON object")
    stdio = kind == "code" and "stdin" in row  # a whole program's row
    fields = FIELDS["code/stdin" if stdio else kind]
    missing = [k for k in ("id", "completion") if k not in row] + [
        k for k, (required, _, _) in fields.items() if required and k not in row]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    if not isinstance(row["completion"], str):
        raise ValueError("field 'completion' must be a string")
    for k, (_, ok, what) in fields.items():
        if k in row and not ok(row[k]):
            raise ValueError(f"field {k!r} must be {what}")
    if stdio:
        if len(row["stdin"]) != len(row["expected_stdout"]):
            raise ValueError("'stdin' and 'expected_stdout' differ in length")
        return row
    if kind == "code" and len(row["inputs"]) != len(row["expected"]):
        raise ValueError("'inputs' and 'expected' differ in length")
    if kind == "code" and row.get("typed"):
        for k in ("inputs", "expected"):
            try:
                typed_json.decode(row[k])
            except (ValueError, TypeError) as e:
                raise ValueError(f"field {k!r} is no typed value (typed is true): {e}") from None
    return row


def _own_id(line: str):
    """A malformed line's own `id`, where it has one that is JSON (else None)."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return row.get("id") if isinstance(row, dict) else None


def _positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlvr_jax.verify", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", required=True, choices=sorted(k for k in FIELDS if "/" not in k))
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--mode", choices=("fresh", "forkserver"), default=None)
    ap.add_argument("--workers", type=_positive(int), default=2)
    ap.add_argument("--timeout", type=_positive(float), default=10.0, help="seconds per job")
    args = ap.parse_args(argv)
    rows, bad, bad_ids = [], {}, {}
    if os.path.isdir(args.input):
        print(f"error: --input {args.input}: a directory, not a JSONL file (one job a line)",
              file=sys.stderr)
        return 2
    if not os.path.isfile(args.input):
        print(f"error: --input {args.input}: no such file", file=sys.stderr)
        return 2
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        print(f"error: --output {args.output}: no folder {out_dir}", file=sys.stderr)
        return 2
    with open(args.input) as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append((n, _parse(line, args.kind)))
            except (ValueError, json.JSONDecodeError) as e:
                bad[n] = f"{args.input}:{n}: {e}"
                bad_ids[n] = _own_id(line)
                print(f"error: {bad[n]}", file=sys.stderr)
    mode = args.mode if args.kind in SANDBOXED else None
    try:
        pool = VerifierPool(args.kind, workers=args.workers, timeout_s=args.timeout, mode=mode)
    except SandboxUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    with pool:
        jobs = [{k: v for k, v in row.items() if k != "id"} for _, row in rows]
        verdicts = dict(zip([n for n, _ in rows], pool.verify(jobs)))
    table = REWARD_TABLES["binary"]
    counts: dict = {}
    with open(args.output, "w") as out:
        ids = {n: row["id"] for n, row in rows}
        for n in sorted(set(verdicts) | set(bad)):
            if n in bad:
                rec = {"id": bad_ids[n], "line": n, "status": "malformed", "detail": bad[n],
                       "latency_s": 0.0, "reward": None}
            else:
                v = verdicts[n]
                rec = {"id": ids[n], "status": v.status.name.lower(), "detail": v.detail,
                       "latency_s": round(v.latency_s, 6),
                       "reward": table.get(v.status) if v.status != Status.SANDBOX_ERROR
                       else None}
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
            out.write(json.dumps(rec) + "\n")
    print(f"scored {len(verdicts)} lines ({len(bad)} malformed) -> {args.output}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
