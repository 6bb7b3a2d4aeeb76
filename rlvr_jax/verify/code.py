"""Python function tasks checked against test cases, the candidate run in the sandbox.

A job is one of two shapes:
  function calls   {"completion", "entry_point": name, "inputs": [[args...], ...],
                    "expected": [value, ...], optional "tolerance", "typed"} (or "host_check":
                    a dataset's own test replayed on the candidate's values, host_check.py)
  stdin/stdout     {"completion", "stdin": [text, ...], "expected_stdout": [text, ...]}: the
                    program runs as __main__ once per input (APPS / TACO / CodeContests rows);
                    outputs compare line by line, trailing whitespace and blank lines
                    ignored, a non-integer number to `tolerance` (default 1e-6, the
                    judges' rule; `same_stdout`). Only the program and the inputs enter the
sandbox; the candidate's return values come back in a JSON encoding that keeps their types
(rlvr_jax/sandbox/typed_json.py) and are compared with `expected` here, on the host. So printing
"PASSED", exiting early (sys.exit / os._exit / atexit), an object whose __eq__ is always true
(it is no plain value), redefining AssertionError, walking stack frames or reading files cannot
reveal or fake the expected values: none of them are in the sandbox.

Two comparisons, by where the expected values came from:
  typed  ("typed": true; inputs and expected in typed_json's encoding, e.g. from an MBPP
         `assert f((3, 4)) == {1: (2,)}`): Python's `==`, so a list is no tuple and `{'1': 2}`
         no `{1: 2}`; an expected float to `tolerance`, an expected integer exactly.
  JSON   (the default: plain JSON rows, e.g. APPS call-based): the returned value as JSON
         writes it, as those datasets' harnesses compare (a returned tuple is a list); a value
         with no JSON form (a set, bytes) or two keys that become one string match nothing.
"""

from __future__ import annotations

import json
import math
import re

from rlvr_jax.sandbox import typed_json
from rlvr_jax.types import Status, Verdict
from rlvr_jax.verify import fence, host_check

_FENCE = fence.pattern(("python3", "python", "py"), re.I)  # ```Python too

# `result_bytes`: the candidate's return values, JSON. 1 MiB parses in ~10 ms on the host (a
# 16 MB result took 4.4 s); a larger result is the candidate's output_limit, decided in the
# sandbox within the wall deadline.
LIMITS = {"memory_mb": 512, "cpu_s": 4, "processes": 32, "file_mb": 16, "open_files": 64,
          "wall_s": 6.0, "output_bytes": 1 << 20, "result_bytes": 1 << 20}

_STATUS = {"syntax_error": Status.SYNTAX_ERROR, "runtime_error": Status.RUNTIME_ERROR,
           "timeout": Status.TIMEOUT, "memory_limit": Status.MEMORY_LIMIT,
           "output_limit": Status.OUTPUT_LIMIT, "sandbox_error": Status.SANDBOX_ERROR}


def extract_program(completion: str, entry_point: str | None = None) -> str:
    """The last ```python fenced block (a bare ``` block only when none is tagged: a solution
    followed by its example input in a bare block is the solution), else the whole completion.
    With an `entry_point`, the last of them that defines it, if one does: a solution followed
    by a block of example calls (`print(f(3))`) is the solution, not the examples."""
    blocks = fence.bodies(_FENCE, completion)
    if entry_point:
        defines = re.compile(r"^\s*(?:async\s+)?def\s+" + re.escape(entry_point) + r"\s*\(", re.M)
        blocks = [b for b in blocks if defines.search(b)] or blocks
    return blocks[-1] if blocks else completion


def wire(job: dict, limits: dict | None = None) -> dict:
    """What enters the sandbox: the program, the calls or the inputs, the limits. Never the
    expected values."""
    program = job.get("prefix", "") + extract_program(job["completion"], job.get("entry_point"))
    out = {"program": program, "limits": dict(LIMITS, **(limits or {}))}
    if "stdin" in job:
        return out | {"stdin": [str(text) for text in job["stdin"]]}
    if job.get("typed"):  # already encoded: a malformed one fails here, the job's own fault
        typed_json.decode(job["inputs"])
    as_typed = (lambda args: args) if job.get("typed") else typed_json.encode
    out["calls"] = [{"fn": job["entry_point"], "args": as_typed(list(args))}
                    for args in job["inputs"]]
    out["typed"] = True  # arguments in, return values out, in typed_json's encoding
    if "host_check" in job:  # the dataset's test: a second phase, after the candidate is gone
        out["check"] = host_check.wire(job["host_check"], [c["args"] for c in out["calls"]])
    return out


# A token the expected output prints as a non-integer number ("0.333333", "1.5e-07"), and a
# token a program prints as a number: plain decimals only, so nothing float() would also
# read ("1_000.5", "nan", "infinity", " 2 ") stands for one. Linear: no run of digits splits
# two ways, so a megabyte of them does not backtrack.
_DECIMAL = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][-+]?\d+)?")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
# The usual judge's rule for real-valued answers ("absolute or relative error <= 1e-6",
# Codeforces' and most CodeContests problems'); a row's "tolerance" replaces it.
STDOUT_TOLERANCE = 1e-6


def same_stdout(got: str, want: str, tol: float = STDOUT_TOLERANCE) -> bool:
    """Program outputs equal line by line, trailing whitespace and trailing blank lines
    ignored; within a line, tokens equal, or where the expected token is a non-integer
    number, the printed number within `tol` of it (absolute or relative error: 0.3333333333
    and 0.333333 for 1/3). Integers and words compare exactly: APPS's harness compares every
    token with np.isclose, which also passes 100001 for 100000."""
    lines = lambda text: [line.rstrip() for line in text.rstrip().splitlines()]
    g, w = lines(got), lines(want)
    return g == w or (len(g) == len(w) and all(
        a == b or _same_tokens(a.split(), b.split(), tol) for a, b in zip(g, w)))


def _same_tokens(got: list[str], want: list[str], tol: float) -> bool:
    return len(got) == len(want) and all(
        a == b or (_DECIMAL.fullmatch(b) is not None and _NUMBER.fullmatch(a) is not None
                   and _near(float(a), float(b), tol)) for a, b in zip(got, want))


def _near(got: float, want: float, tol: float) -> bool:
    """|got - want| <= tol x max(1, |want|), both finite (a 400-digit token reads as inf)."""
    return (math.isfinite(got) and math.isfinite(want)
            and abs(got - want) <= tol * max(1.0, abs(want)))


def same(got, want, tol: float) -> bool:
    """JSON values equal, an expected float to `tol` (relative and absolute), an expected
    integer exactly (as judges compare, and Python's `==`: to a relative 1e-9, 1000000008
    passed for 1000000007); bool is not a number."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        if got == want or isinstance(want, int):  # exact for ints of any size
            return got == want
        try:
            return math.isclose(got, want, rel_tol=tol, abs_tol=tol)
        except OverflowError:  # an int too large for a float: it is no float near `want`
            return False
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(same(g, w, tol) for g, w in zip(got, want))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k], tol) for k in want)
    return type(got) is type(want) and got == want


def short(value, limit: int) -> str:
    """`str(value)` cut to `limit` characters, for details; never raises (an int past
    Python's 4300-digit conversion limit does on `str`)."""
    try:
        return str(value)[:limit]
    except ValueError:
        return f"<{type(value).__name__} too large to print>"


def neutral_reply(job: dict) -> dict:
    """A reply that says nothing about any candidate (the firewall's control)."""
    cases = job.get("inputs", job.get("stdin", []))
    return {"status": "ok", "outputs": [{"value": None} for _ in cases],
            "check": {"passed": False, "detail": "neutral"}}


def tolerance(job: dict, default: float) -> float:
    """The row's tolerance; one that is no number >= 0 (NaN, negative: math.isclose raises on
    it) compares exactly."""
    try:
        tol = float(job.get("tolerance", default))
    except (TypeError, ValueError):
        return 0.0
    return tol if tol >= 0 else 0.0


def verdict(job: dict, reply: dict) -> Verdict:
    status = reply.get("status")
    if status != "ok":
        return Verdict(_STATUS.get(status, Status.SANDBOX_ERROR),
                       short(reply.get("detail", ""), 500))
    outputs = reply.get("outputs", [])
    if "host_check" in job:  # the dataset's own test decides, on the host (e.g. HumanEval)
        if len(outputs) != len(job["inputs"]):
            return Verdict(Status.SANDBOX_ERROR, f"{len(outputs)} outputs for "
                                                 f"{len(job['inputs'])} calls")
        checked = host_check.verdict(reply)
        if checked is None:
            return Verdict(Status.SANDBOX_ERROR, "no result from the dataset's test")
        ok, detail = checked
        return Verdict(Status.PASS if ok else Status.WRONG, detail, fraction=float(ok))
    if "expected_stdout" in job:
        expected = [str(text) for text in job["expected_stdout"]]
        stdout_tol = tolerance(job, STDOUT_TOLERANCE)
        match = lambda out, want: isinstance(out.get("value"), str) and same_stdout(
            out["value"], want, stdout_tol)
    else:
        typed = bool(job.get("typed"))
        expected = job["expected"] if typed else json.loads(json.dumps(job["expected"]))
        tol = tolerance(job, 1e-9)
        unwrap = bool(job.get("unwrap_single"))  # APPS call-based rows: [v] or v both pass

        def match(out, want):
            if "value" not in out:
                return False
            if typed:
                return typed_json.same(out["value"], want, tol)
            try:
                got = typed_json.as_json(out["value"])
            except typed_json.NotAValue:
                return False
            return same(got, want, tol) or (
                unwrap and isinstance(want, list) and len(want) == 1
                and same(got, want[0], tol))
    if len(outputs) != len(expected):
        return Verdict(Status.SANDBOX_ERROR, f"{len(outputs)} outputs for {len(expected)} tests")
    passed = 0
    first_fail = ""
    for i, (out, want) in enumerate(zip(outputs, expected)):
        if match(out, want):
            passed += 1
        elif not first_fail:
            first_fail = (f"test {i}: got {typed_json.show(out['value'], 80)}" if "value" in out
                          else f"test {i}: got {short(out.get('error'), 80)}")
    if passed == len(expected):
        return Verdict(Status.PASS, f"{passed}/{len(expected)} tests", fraction=1.0)
    return Verdict(Status.WRONG, f"{passed}/{len(expected)} tests; {first_fail}",
                   fraction=passed / max(len(expected), 1))
