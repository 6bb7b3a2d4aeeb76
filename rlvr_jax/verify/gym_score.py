"""reasoning-gym answers, scored by reasoning-gym's own scorer for their dataset, in the sandbox
(kind `reasoning_gym`).

Why the sandbox: several of its scorers read the answer with `eval` or sympy's `parse_expr`
(number_sorting, spiral_matrix, string_insertion, n_queens, binary_matrix, countdown, ...),
that is, they run the candidate's text. So a scorer runs like a candidate program: in
bubblewrap, in a child forked per job from a worker that has reasoning-gym imported, with the
trainer's interpreter and site-packages read-only (sandbox/trainer_python.py). A scorer that
raises, loops or allocates is the candidate's doing: WRONG (the scorer raised on its answer),
TIMEOUT, MEMORY_LIMIT; nothing it does reaches the host or another sample.

A job: {"dataset": name, "config": {...}, "seed": int, "index": int, "completion": str,
"entry"?: {"question", "answer", "metadata"}}. With `entry` (a data file's row, tasks/mixed.py,
or the trainer's generated item whenever it is JSON, tasks/gym.py) the scorer reads that
entry, with the dataset's config (default for a file's row); without, the entry is
regenerated in the sandbox from (dataset, config, seed, index), which some generators do not
repeat across processes (their output depends on the string-hash seed). The answer is the completion's last
`<answer>...</answer>` (reasoning-gym's `extract_answer`).

Verdicts: no answer tag -> UNPARSEABLE; score 1.0 -> PASS; any other score -> WRONG with
`fraction` = the score. reasoning-gym's default scorer gives partial credit when the oracle
answer is a substring of a longer answer (len(oracle) / len(answer)), so padding an answer
around the truth would pay: only a full score passes, and only the `graded` reward scheme pays
a fraction (rewards.py). A scorer broken for every answer (a bad dataset config) is caught
before training, on the host, by scoring the datasets' own answers (tasks/reasoning_gym.py).
"""

from __future__ import annotations

import inspect
import math

from rlvr_jax.types import Status, Verdict
from rlvr_jax.verify import code, isolated_eval
from rlvr_jax.sandbox.trainer_python import TrainerPython

_ISOLATION = inspect.getsource(isolated_eval)

# The worker holds reasoning-gym (and numpy, sympy) in its address space before each child
# forks: a larger address-space cap than a candidate program's, the same wall clock.
LIMITS = dict(code.LIMITS, memory_mb=3072, cpu_s=4, wall_s=6.0)
PYTHON = TrainerPython(preload=("reasoning_gym",))
SIZE = 2 ** 31 - 1  # a dataset's virtual size: any index is an item (generated on demand)

# The scorer's process never evaluates the answer itself: `guarded()` (isolated_eval.py,
# whose source leads the program) runs every `eval` / `exec` a scorer makes on it in a
# grandchild that returns data only, so the score is computed by code the answer never ran in.
PROGRAM = _ISOLATION + '''
import math
import reasoning_gym
from reasoning_gym.utils import extract_answer

def score(dataset, config, seed, index, size, completion, entry=None):
    data = reasoning_gym.create_dataset(dataset, seed=seed, size=size, **config)
    item = data[index] if entry is None else entry  # generated unguarded: the dataset's code
    answer = extract_answer(completion)
    if answer is None:
        return {"found": False, "score": 0.0}
    try:
        with guarded():
            s = float(data.score_answer(answer, item))
    except EvaluationLimit:
        pass
    if limit_hit():  # the answer's evaluation hit a limit: that, whatever the scorer made of it
        return {"found": True, "score": 0.0, "limit": limit_hit()}
    return {"found": True, "score": s if math.isfinite(s) else 0.0}
'''


_LIMITS = {"timeout": Status.TIMEOUT, "memory_limit": Status.MEMORY_LIMIT,
           "output_limit": Status.OUTPUT_LIMIT}


def wire(job: dict) -> dict:
    if "entry" in job:  # the entry itself: a data file's row, or the trainer's generated item
        args = [str(job["dataset"]), dict(job.get("config", {})), int(job.get("seed", 0)), 0,
                1, str(job["completion"]), dict(job["entry"])]
    else:  # regenerated from the generator
        args = [str(job["dataset"]), dict(job.get("config", {})), int(job["seed"]),
                int(job["index"]), SIZE, str(job["completion"])]
    return {"program": PROGRAM, "limits": LIMITS, "calls": [{"fn": "score", "args": args}]}


def verdict(job: dict, reply: dict) -> Verdict:
    if reply.get("status") != "ok":  # a limit, or the sandbox itself (code's mapping)
        return code.verdict({"completion": "", "inputs": [], "expected": []}, reply)
    out = reply["outputs"][0]
    if "error" in out:  # its name only: the message may quote what the answer evaluated to
        name = str(out["error"]).split(":", 1)[0][:60]
        return Verdict(Status.WRONG, f"the scorer raised {name} on this answer", fraction=0.0)
    value = out["value"]
    if value.get("limit") in _LIMITS:
        return Verdict(_LIMITS[value["limit"]], "the answer's evaluation hit its limit",
                       fraction=0.0)
    found, s = bool(value["found"]), float(value["score"])
    if not found:
        return Verdict(Status.UNPARSEABLE, "no <answer>...</answer>", fraction=0.0)
    s = min(max(s, 0.0), 1.0) if math.isfinite(s) else 0.0
    if s == 1.0:
        return Verdict(Status.PASS, "score 1.0", fraction=1.0)
    return Verdict(Status.WRONG, f"score {s:.3f}", fraction=s)


def neutral_reply(job: dict) -> dict:
    """A reply that says nothing about any candidate (the firewall's control)."""
    return {"status": "ok", "outputs": [{"value": {"found": False, "score": 0.0}}]}
