"""SQL answers: the candidate query runs in the sandbox against an in-memory SQLite database
built from the task's schema script, read-only (`PRAGMA query_only`), under a time limit; the
result rows are compared here on the host, in order or as a multiset (`ordered`).

A job: {"completion": text (the last ```sql block, else the text), "schema": SQL script,
"expected": [[...], ...], "ordered": bool}."""

from __future__ import annotations

import json
import math
import re
from collections import Counter

from rlvr_jax.types import Status, Verdict
from rlvr_jax.verify import code, fence

_FENCE = fence.pattern(("sql",), re.I)
LIMITS = dict(code.LIMITS, cpu_s=3, wall_s=5.0)


def extract_query(completion: str) -> str:
    block = fence.last_body(_FENCE, completion)
    return (completion if block is None else block).strip().rstrip(";").strip()


def wire(job: dict) -> dict:
    return {"kind": "sql", "schema": job["schema"], "query": extract_query(job["completion"]),
            "limits": LIMITS, "max_rows": int(job.get("max_rows", 10000))}


def neutral_reply(job: dict) -> dict:
    """A reply that says nothing about any candidate (the firewall's control)."""
    return {"status": "ok", "outputs": [{"value": []}]}


def _key(row) -> str:
    """A row's text for comparison: floats to 9 decimals, an integral float as its int (2.0 ==
    2, as Python compares them: `AVG` and an integer expression give either)."""
    def cell(v):
        if isinstance(v, float) and math.isfinite(v):
            v = round(v, 9)
            return int(v) if v.is_integer() else v
        return v
    return json.dumps([cell(v) for v in row])


def verdict(job: dict, reply: dict) -> Verdict:
    status = reply.get("status")
    if status != "ok":
        return code.verdict(job, reply)  # same status mapping
    got = reply["outputs"][0]["value"]
    want = json.loads(json.dumps(job["expected"]))
    if job.get("ordered", False):
        ok = len(got) == len(want) and all(_key(a) == _key(b) for a, b in zip(got, want))
    else:
        ok = Counter(map(_key, got)) == Counter(map(_key, want))
    return Verdict(Status.PASS if ok else Status.WRONG,
                   f"{len(got)} rows, expected {len(want)}"
                   + ("" if ok else f"; first got {code.short(got[:1], 60)}"))
