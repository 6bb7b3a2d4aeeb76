"""Score a file of completions:

    python -m rlvr_jax.verify --kind KIND --input jobs.jsonl --output verdicts.jsonl
        [--mode fresh|forkserver] [--workers N] [--timeout S]

One JSON object a line: `id`, `completion`, and the kind's reference fields
  math: `gold` (final answer)
  code: `entry_point`, `inputs` (list of argument lists), `expected` (list of return values),
        optional `prefix` (code prepended to the completion) and `tolerance`
  sql: `schema` (SQL script building the database), `expected` (rows), optional `ordered`
  tool: `expected` (the tool's result), optional `tools` (allowed tool names)
  logic: `premises` (formulas), optional `target`
  retrieval: `document`, `answer` (string or list of accepted strings)
Each output line is {"id", "status", "detail", "latency_s", "reward"} (reward: the binary
table). A malformed line is reported on stderr with its line number and written as a
`malformed` record with that reason; every other line is still scored.
"""

from __future__ import annotations

import argparse
import json
import sys

from rlvr_jax.rewards import REWARD_TABLES
from rlvr_jax.types import Status
from rlvr_jax.verify.pool import VerifierPool

REQUIRED = {"math": ("gold",), "code": ("entry_point", "inputs", "expected"),
            "sql": ("schema", "expected"), "tool": ("expected",), "logic": ("premises",),
            "retrieval": ("document", "answer")}
SANDBOXED = ("code", "sql", "tool")


def _parse(line: str, kind: str) -> dict:
    row = json.loads(line)
    if not isinstance(row, dict):
        raise ValueError("expected a JSON object")
    missing = [k for k in ("id", "completion", *REQUIRED[kind]) if k not in row]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    if kind == "code" and len(row["inputs"]) != len(row["expected"]):
        raise ValueError("'inputs' and 'expected' differ in length")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", required=True, choices=sorted(REQUIRED))
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--mode", choices=("fresh", "forkserver"), default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0)
    args = ap.parse_args(argv)
    rows, bad = [], {}
    with open(args.input) as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append((n, _parse(line, args.kind)))
            except (ValueError, json.JSONDecodeError) as e:
                bad[n] = f"{args.input}:{n}: {e}"
                print(f"error: {bad[n]}", file=sys.stderr)
    mode = args.mode if args.kind in SANDBOXED else None
    with VerifierPool(args.kind, workers=args.workers, timeout_s=args.timeout, mode=mode) as pool:
        jobs = [{k: v for k, v in row.items() if k != "id"} for _, row in rows]
        verdicts = dict(zip([n for n, _ in rows], pool.verify(jobs)))
    table = REWARD_TABLES["binary"]
    counts: dict = {}
    with open(args.output, "w") as out:
        ids = {n: row["id"] for n, row in rows}
        for n in sorted(set(verdicts) | set(bad)):
            if n in bad:
                rec = {"id": None, "line": n, "status": "malformed", "detail": bad[n],
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
