"""One tool call of a multi-turn episode, run in the sandbox (kind `tool_run`): the
environment (rlvr_jax/envs/) has validated the call against the tool's schema; here it becomes
the tool's implementation called with the model's arguments (`wire`), and the worker's reply
becomes what the policy reads next (`verdict`: the observation text in `detail`).

A job: {"tool": name, "arguments": {...}, "context"?: {"_key": value}} (the task's context:
keys the schemas never have, so only the task sets them; each tool gets the keys it declares,
toolbox.CONTEXT, and a tool's host-side FINISH reads the rest, e.g. run_tests' expected
values, which never enter the sandbox). Outcomes, as statuses of the reply:
  PASS            the tool returned: detail is its stdout (python) and its result
  RUNTIME_ERROR   the tool raised: detail "error: <exception>" (the model sees it)
  TIMEOUT / MEMORY_LIMIT / OUTPUT_LIMIT   the call hit a limit: detail "error: ..."
  SANDBOX_ERROR   the sandbox failed: the episode is out of the loss (never a wrong answer)
No JAX import; behind the verdict firewall like every sandboxed kind (rlvr_jax/sandbox/codecs.py).
"""

from __future__ import annotations

import json

from rlvr_jax.types import Status, Verdict
from rlvr_jax.verify import code
from rlvr_jax.verify.toolbox import CONTEXT, FINISH, IMPLEMENTATIONS

# A tool call is cheaper than a test run: a shorter wall clock, the same containment.
LIMITS = dict(code.LIMITS, wall_s=4.0, cpu_s=3)
MAX_DETAIL = 20_000  # characters kept of an observation (the environment cuts it to tokens)
_LIMIT_TEXT = {Status.TIMEOUT: "error: the tool call timed out",
               Status.MEMORY_LIMIT: "error: the tool call ran out of memory",
               Status.OUTPUT_LIMIT: "error: the tool call's output is too large",
               Status.SYNTAX_ERROR: "error: the code does not parse"}


def wire(job: dict) -> dict:
    program = IMPLEMENTATIONS[job["tool"]] + "\ndef _call(kw):\n    return tool(**kw)\n"
    declared = CONTEXT.get(job["tool"], ())
    context = {k: v for k, v in job.get("context", {}).items() if k in declared}
    return {"program": program, "limits": LIMITS,
            "calls": [{"fn": "_call", "args": [dict(job["arguments"], **context)]}]}


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def verdict(job: dict, reply: dict) -> Verdict:
    status = reply.get("status")
    stdout = reply.get("stdout", "")
    stdout = stdout if isinstance(stdout, str) else ""
    if status == "ok":
        out = reply["outputs"][0]
        if "error" in out:
            return Verdict(Status.RUNTIME_ERROR, (stdout + f"error: {out['error']}")[:MAX_DETAIL])
        finish = FINISH.get(job.get("tool"))
        text = (finish(out["value"], dict(job.get("context", {}))) if finish
                else _text(out["value"]))
        return Verdict(Status.PASS, (stdout + text)[:MAX_DETAIL])
    got = code.verdict({"completion": "", "inputs": [], "expected": []}, reply)
    if got.status == Status.SANDBOX_ERROR:
        return got
    text = _LIMIT_TEXT.get(got.status, f"error: {got.detail}")
    return Verdict(got.status, (stdout + text)[:MAX_DETAIL])


def observation(v: Verdict) -> str:
    """What the policy reads for a call's verdict: this codec's text, or for an outcome the
    pool decided itself (a worker killed at the job's deadline) the limit's own words."""
    if v.status == Status.PASS or "error: " in v.detail:
        return v.detail
    return _LIMIT_TEXT.get(v.status, f"error: {v.detail}")


def neutral_reply(job: dict) -> dict:
    """A reply that says nothing about any candidate (the firewall's control)."""
    return {"status": "ok", "outputs": [{"value": None}]}
