"""The final-state check of a stateful environment, in a fresh verification sandbox (kind
`world_check`, registered here): the environment module's `check(files, goal)` (envs/
world.py) runs in a one-shot worker's child on the files read out of the episode's session
and the task's hidden goal, which never entered the session.

A job: {"source": the module's check source, "files": {path: base64}, "goal": JSON}. The
check returns a score in [0, 1] (or a bool); 1 is PASS, less is WRONG with that fraction;
or {"score": s, "parts": {name: value}}: the same score and named rewards beside it
(Verdict.parts, the task's reward components: at most 16, finite, names of up to 64
characters; anything else is the agent's WRONG, as a check that gave no score is). A
check that raises on what the agent left (a corrupt database, a file that does not parse) is
the agent's WRONG, the exception named; a check that runs past its limits (it ran the agent's
code, which looped) is the agent's TIMEOUT / MEMORY_LIMIT. Only a sandbox that fails is
SANDBOX_ERROR. A check that runs the agent's code does so in a subprocess (the agent's code
then holds none of the worker's descriptors: it cannot write the check's result)."""

from __future__ import annotations

import math
import sys
import types

from rlvr_jax.sandbox import codecs
from rlvr_jax.types import Status, Verdict
from rlvr_jax.verify import code

KIND = "world_check"
LIMITS = dict(code.LIMITS, wall_s=20.0, cpu_s=20, memory_mb=1024, file_mb=16, processes=64)

_RUNNER = '''

def _rlvr_check(files, goal):
    import base64
    got = check({k: base64.b64decode(v) for k, v in files.items()}, goal)
    if isinstance(got, dict):
        return {"score": float(got["score"]),
                "parts": {str(k): float(v) for k, v in dict(got.get("parts", {})).items()}}
    if isinstance(got, bool):
        return 1.0 if got else 0.0
    if isinstance(got, (int, float)):
        return float(got)
    raise TypeError("check returned %s, not a score" % type(got).__name__)
'''


def wire(job: dict) -> dict:
    return {"program": job["source"] + _RUNNER, "limits": LIMITS,
            "calls": [{"fn": "_rlvr_check", "args": [job["files"], job.get("goal")]}]}


def verdict(job: dict, reply: dict) -> Verdict:
    if reply.get("status") != "ok":
        got = code.verdict({"completion": "", "inputs": [], "expected": []}, reply)
        return Verdict(got.status, f"the final-state check: {got.detail}")
    out = reply.get("outputs", [{}])[0]
    if "error" in out:
        return Verdict(Status.WRONG,
                       f"the final-state check failed: {code.short(out['error'], 300)}")
    score, parts = out.get("value"), ()
    if isinstance(score, dict):
        score, parts = score.get("score"), _parts(score.get("parts"))
        if parts is None:
            return Verdict(Status.WRONG, "the final-state check gave malformed parts")
    if not _finite(score):
        return Verdict(Status.WRONG, "the final-state check gave no score")
    score = min(max(float(score), 0.0), 1.0)
    return Verdict(Status.PASS if score >= 1.0 else Status.WRONG,
                   f"final state: score {score:.3g}", fraction=score, parts=parts)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _parts(raw):
    """((name, value), ...) from a check's parts, or None when they are not a small dict of
    short names to finite numbers."""
    if not isinstance(raw, dict) or len(raw) > 16:
        return None
    if not all(isinstance(k, str) and len(k) <= 64 and _finite(v) for k, v in raw.items()):
        return None
    return tuple(sorted((k, float(v)) for k, v in raw.items()))


def neutral_reply(job: dict) -> dict:
    return {"status": "ok", "outputs": [{"value": 0.0}]}


codecs.register(KIND, sys.modules[__name__])


def kind_for(workspace: str) -> str:
    """The check's kind for an environment whose workspace is `workspace`: the plain one for
    /tmp; else one whose boxes also have that directory, /tests and /logs writable (a
    Harbor task's tests/test.sh expects them), one box per check (nothing is emptied)."""
    if workspace == "/tmp":
        return KIND
    kind = f"{KIND}:{workspace}"
    if codecs.codec(kind) is None:
        codecs.register(kind, types.SimpleNamespace(
            wire=wire, verdict=verdict, neutral_reply=neutral_reply,
            TMPFS=tuple(dict.fromkeys((workspace, "/tests", "/logs")))))
    return kind
