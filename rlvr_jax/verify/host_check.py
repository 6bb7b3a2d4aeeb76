"""Checks by a dataset's own trusted test code (HumanEval's `check(candidate)`, Chen et al.
2021, and MBPP asserts that are not a literal comparison), run against the outputs the
candidate returned, never in a process or at a moment where candidate code runs. A code job
with a `host_check` field is recorded here and scored by its replay (`code.verdict`).

The test's `check` runs twice, with `random` seeded the same way:
  1. record (when the job is made, on the host, `record`): `check` runs with the canonical
     solution (trusted) behind a proxy that records every call's arguments, in the typed
     encoding (rlvr_jax/sandbox/typed_json.py: a tuple stays a tuple, a set a set);
  2. replay (at scoring, `REPLAY`): the sandbox has run the candidate on the recorded
     arguments; `check` runs again with a proxy that returns those outputs in order, rebuilt
     with their types (a returned list is no tuple, an int-keyed dict keeps its keys), so its
     own assertions (equality, tolerances, properties such as "poly(x) is near 0") decide.
     The replay answers only the calls the candidate ran: each of the test's calls must repeat
     its recorded arguments (in `f(f(1))` the candidate ran on the reference's f(1); answering
     the outer call so passed an f wrong at 1) and every recorded call must be made (a test
     that stops early on an output never checks the rest). A candidate whose outputs change
     the test's calls so fails, whatever the test catches. A built-in exception the candidate
     raised is raised again as its class (a test may expect a ValueError).
The replay runs on candidate values, which can make a test loop or allocate without bound
(`assert sum(range(f(3))) == 3` with f returning 10**13; `'ab' * f(2)`): so it never runs on
the host. The sandbox worker runs it as the job's second phase, in a child forked after every
process of the candidate is dead, under `LIMITS` and the job's deadline; only [passed, detail]
comes back (rlvr_jax/sandbox/box_worker.py: run_check). A limit it hits is the candidate's
verdict.
"""

from __future__ import annotations

import random

from rlvr_jax.sandbox import typed_json


def _namespace(problem: dict) -> dict:
    """The prompt's helpers and the reference solution (some tests compute expected values
    with it, e.g. HumanEval/33), then the test's `check`. Trusted dataset code, on the host."""
    ns: dict = {"__name__": "__humaneval__"}
    exec(problem["prompt"] + problem["canonical_solution"], ns)
    exec(problem["test"], ns)
    return ns


def record(problem: dict) -> list:
    """The arguments of every call `check` makes, each list in the typed encoding (taken
    before the call: a reference may change its arguments)."""
    ns = _namespace(problem)
    ref = ns[problem["entry_point"]]
    calls = []

    def proxy(*args):
        calls.append(typed_json.encode(list(args)))
        return ref(*args)

    random.seed(0)
    ns["check"](proxy)
    return calls


# The replay, run by the sandbox worker as the job's second phase (box_worker.py: run_check):
# in a child forked after every candidate process is dead, under its own limits. Standalone
# (stdlib only: the sandbox's interpreter); `replay(problem, outputs)` -> [passed, detail].
REPLAY = '''
import json
import random

try:
    import typed_json  # in the sandbox: beside the worker
except ImportError:  # the host's tests
    from rlvr_jax.sandbox import typed_json


class _OutOfOutputs(BaseException):
    """The replay cannot answer a call: a BaseException, so a test's own `except Exception`
    does not swallow it (and a bare `except:` cannot either: it is remembered, see replay)."""


def _raised(error):
    """The candidate's exception as the test would have seen it: its built-in class when it
    named one (a test may expect a ValueError), else a RuntimeError."""
    import builtins

    kind = getattr(builtins, str(error).split(":", 1)[0], None)
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = RuntimeError
    return kind(error)


def replay(problem, outputs):
    ns = {"__name__": "__humaneval__"}
    exec(problem["prompt"] + problem["canonical_solution"], ns)
    exec(problem["test"], ns)
    calls = problem["calls"]
    used = [0]
    unanswered = []

    def proxy(*args):
        i = used[0]
        if i >= len(outputs):
            unanswered.append("the test made more calls than recorded (%d)" % i)
        # The candidate ran on the recorded arguments: a call with others (an argument made
        # from an earlier output, as in f(f(1))) would be answered for the reference's value
        elif json.dumps(typed_json.encode(list(args))) != json.dumps(calls[i]):
            unanswered.append("call %d of the test had other arguments than recorded (they "
                              "depend on the candidate's outputs)" % (i + 1))
        if unanswered:
            raise _OutOfOutputs(unanswered[0])
        out = outputs[i]
        used[0] += 1
        if "error" in out:
            raise _raised(out["error"])
        return typed_json.decode(out["value"])

    random.seed(0)
    failed = None
    try:
        ns["check"](proxy)
    except _OutOfOutputs:
        pass
    except AssertionError:
        failed = "assertion failed after %d calls" % used[0]
    except Exception as e:
        try:
            text = str(e)[:80]
        except Exception:
            text = "?"
        failed = "%s after %d calls: %s" % (type(e).__name__, used[0], text)
    if unanswered or failed:  # a call the replay could not answer, even if the test caught it
        return [False, (unanswered or [failed])[0]]
    if used[0] != len(outputs):  # recorded calls the test no longer makes are never checked
        return [False, "the test made %d of its %d recorded calls" % (used[0], len(outputs))]
    return [True, "check passed (%d calls)" % used[0]]
'''

# The replay's own limits: a test is small, the values it gets are the candidate's.
LIMITS = {"memory_mb": 512, "cpu_s": 3, "processes": 4, "file_mb": 1, "open_files": 32,
          "wall_s": 3.0, "output_bytes": 1 << 16, "result_bytes": 1 << 16}


def wire(problem: dict, calls: list) -> dict:
    """The job's second phase for the sandbox worker: the replay called on the outputs.
    `calls`: the recorded arguments (`record`), which the replay's calls must repeat."""
    keys = ("prompt", "canonical_solution", "test")
    return {"program": REPLAY, "fn": "replay", "limits": LIMITS,
            "args": [{**{k: problem[k] for k in keys}, "calls": calls}]}


def verdict(reply: dict):
    """(passed, detail) from the worker's second phase; None when it is missing or malformed
    (the worker's own failure)."""
    check = reply.get("check")
    if not (isinstance(check, dict) and isinstance(check.get("passed"), bool)
            and isinstance(check.get("detail"), str)):
        return None
    return check["passed"], check["detail"]
