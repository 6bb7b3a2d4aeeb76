"""Host-side checks by a dataset's own trusted test code (HumanEval's `check(candidate)`,
Chen et al. 2021), run against the outputs the sandbox returned, so expected values never enter
the sandbox. A code job with a `host_check` field is scored here (`code.verdict`).

The test's `check` runs on the host twice, with `random` seeded the same way:
  1. record (when the job is made, `record`): `check` runs with the canonical solution behind a
     proxy that records every call's arguments (and the shape of each result, to restore tuples
     after JSON);
  2. replay (at scoring, `replay`): the sandbox has run the candidate on the recorded
     arguments; `check` runs again with a proxy that returns those outputs in order, so its own
     assertions (equality, tolerances, properties such as "poly(x) is near 0") decide. A
     candidate whose outputs change the test's control flow runs out of recorded outputs and
     fails.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any


class _OutOfOutputs(Exception):
    pass


def _tag(x: Any) -> Any:
    """JSON-able description of a value's containers (tuples tagged)."""
    if isinstance(x, tuple):
        return {"__tuple__": [_tag(v) for v in x]}
    if isinstance(x, list):
        return [_tag(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _tag(v) for k, v in x.items()}
    return None  # a leaf: kept as the candidate returned it


def _like(value: Any, template: Any) -> Any:
    """Restore tuples (lost in JSON) where the reference returned a tuple."""
    if isinstance(template, dict) and "__tuple__" in template and isinstance(value, list):
        t = template["__tuple__"]
        return tuple(_like(v, t[i]) if i < len(t) else v for i, v in enumerate(value))
    if isinstance(template, list) and isinstance(value, list):
        return [_like(v, template[i]) if i < len(template) else v for i, v in enumerate(value)]
    return value


def _namespace(problem: dict) -> dict:
    """The prompt's helpers and the reference solution (some tests compute expected values
    with it, e.g. HumanEval/33), then the test's `check`. Trusted dataset code, on the host."""
    ns: dict = {"__name__": "__humaneval__"}
    exec(problem["prompt"] + problem["canonical_solution"], ns)
    exec(problem["test"], ns)
    return ns


def record(problem: dict) -> tuple[list, list]:
    """(arguments of every call `check` makes, shape templates of the reference results)."""
    ns = _namespace(problem)
    ref = ns[problem["entry_point"]]
    calls, templates = [], []

    def proxy(*args):
        calls.append(json.loads(json.dumps(copy.deepcopy(list(args)))))
        out = ref(*args)
        templates.append(_tag(out))
        return out

    random.seed(0)
    ns["check"](proxy)
    return calls, templates


def replay(job: dict, outputs: list) -> tuple[bool, str]:
    """Run the problem's `check` against the sandbox outputs; (passed, detail)."""
    problem = job["host_check"]
    ns = _namespace(problem)
    it = iter(zip(outputs, problem["templates"]))
    used = [0]

    def proxy(*args):
        try:
            out, template = next(it)
        except StopIteration:
            raise _OutOfOutputs from None
        used[0] += 1
        if "error" in out:
            raise RuntimeError(out["error"])
        return _like(out["value"], template)

    random.seed(0)
    try:
        ns["check"](proxy)
    except _OutOfOutputs:
        return False, f"the test made more calls than recorded ({used[0]})"
    except AssertionError:
        return False, f"assertion failed after {used[0]} calls"
    except Exception as e:
        return False, f"{type(e).__name__} after {used[0]} calls: {str(e)[:80]}"
    return True, f"check passed ({used[0]} calls)"
