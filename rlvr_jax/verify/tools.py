"""Tool use: the completion makes one JSON tool call, `{"tool": NAME, "arguments": {...}}`
(the last JSON object in the text, or a ```json block). The call is validated on the host
against the tool's JSON schema (required keys, types, enums, no extra keys), then executed in
the sandbox (the tools run code on model-chosen arguments), and its result is compared on the
host with the task's expected outcome.

The tools and their schemas are toolbox.py's (shared with the multi-turn environments).
A job: {"completion", "tools": [allowed names], "expected": value, "tolerance"?}.
"""

from __future__ import annotations

import json
import re

from rlvr_jax.types import Status, Verdict
from rlvr_jax.verify import code, fence, json_scan
from rlvr_jax.verify.toolbox import IMPLEMENTATIONS as _IMPL
from rlvr_jax.verify.toolbox import SCHEMAS, check_call

_JSON_BLOCK = fence.pattern(("json",), re.I)


def extract_call(completion: str):
    """The tool call object, or None: the last ```json block that holds one, else the
    last-starting JSON object with a "tool" key. Linear in the completion's length
    (json_scan.py); nesting past json_scan.MAX_DEPTH is no call."""
    found = json_scan.objects(completion, "tool")
    starts = []
    for m in reversed(list(_JSON_BLOCK.finditer(completion))):
        first = json_scan._WS.match(completion, m.start("body")).end()
        f = found.get(first)
        if f is not None and f.end >= 0 and f.end <= m.end("body"):  # the block opens with it
            starts.append(first)
    starts += sorted(found, reverse=True)
    for start in starts:
        f = found[start]
        if f.end >= 0 and f.has_key:
            obj = json_scan.load(completion, f, start)
            if obj is not None and "tool" in obj:
                return obj
    return None


def validate(call, allowed) -> str:
    """'' if the call is valid, else why not."""
    if call is None:
        return "no JSON tool call found"
    if set(call) - {"tool", "arguments"} or not isinstance(call.get("arguments", {}), dict):
        name = call.get("tool")
        if isinstance(name, str) and name in SCHEMAS and name in allowed:
            return "a call is {\"tool\": name, \"arguments\": {...}}"
    return check_call(call.get("tool"), call.get("arguments", {}), allowed)


def wire(job: dict) -> dict:
    call = extract_call(job["completion"])
    if validate(call, job.get("tools", list(SCHEMAS))):
        program, calls = "def tool():\n    return None", [[]]  # verdict() reports the reason
    else:
        program, calls = _IMPL[call["tool"]], [[call["arguments"]]]
    return {"program": program + "\ndef _call(kw):\n    return tool(**kw)\n",
            "limits": code.LIMITS,
            "calls": [{"fn": "_call" if calls[0] else "tool", "args": c} for c in calls]}


def verdict(job: dict, reply: dict) -> Verdict:
    call = extract_call(job["completion"])
    problem = validate(call, job.get("tools", list(SCHEMAS)))
    if problem:
        return Verdict(Status.UNPARSEABLE, problem)
    if reply.get("status") != "ok":
        return code.verdict(job, reply)
    out = reply["outputs"][0]
    if "error" in out:
        return Verdict(Status.RUNTIME_ERROR, f"tool raised {code.short(out['error'], 80)}")
    ok = code.same(out["value"], json.loads(json.dumps(job["expected"])),
                   code.tolerance(job, 1e-9))
    return Verdict(Status.PASS if ok else Status.WRONG,
                   f"{call['tool']} returned {code.short(out['value'], 40)}")


def neutral_reply(job: dict) -> dict:
    """A reply that says nothing about any candidate (the firewall's control)."""
    return {"status": "ok", "outputs": [{"value": None}]}
