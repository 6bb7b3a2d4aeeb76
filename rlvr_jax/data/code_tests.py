"""Unit tests of code datasets as code-verifier job fields (verify/code.py), in the shapes the
field ships them:

  stdin/stdout   {"inputs": [text, ...], "outputs": [text, ...]}                 APPS, TACO,
                 CodeContests, PRIME-style rows: the program reads stdin, prints its answer
  call-based     {"fn_name": name, "inputs": [[args], ...], "outputs": [value, ...]}   APPS /
                 TACO call-based rows (an output may come wrapped in a one-element list, which
                 APPS accepts either way: so do we)
  asserts        {"entry_point"?: name, "test_list": ["assert f(1) == 2", ...],
                  "test_setup_code"?: code, "code"? | "reference"?: a reference solution}  MBPP
  check          {"entry_point": name, "test": "def check(candidate): ...",
                  "canonical_solution" | "reference": code, "prompt"?: code prefix}  HumanEval

Expected values never enter the sandbox. An assert of the form `assert f(<literals>) ==
<literal>` becomes a call with its expected value compared on the host with Python's `==` (both
in the typed encoding, rlvr_jax/sandbox/typed_json.py: `(4, 5)` is no `[4, 5]`); other asserts
(isclose, several calls) and HumanEval's `check` run as the job's second phase against the
candidate's outputs, their calls recorded once with the row's reference solution
(verify/host_check.py): a row whose tests need that and has no reference is a bad row.
`tests_of` raises ValueError with the reason; the loader names the file and line.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from rlvr_jax.sandbox import typed_json
from rlvr_jax.verify import host_check


def tests_of(spec: Any, uid: str) -> dict:
    """The code job's test fields for a row's test spec (a dict or its JSON text)."""
    if isinstance(spec, str):
        spec = json.loads(spec)
    if not isinstance(spec, dict):
        raise ValueError(f"tests must be a JSON object, got {type(spec).__name__}")
    if "fn_name" in spec:
        return _calls(spec)
    if "inputs" in spec and "outputs" in spec:
        return _stdio(spec)
    if "test_list" in spec or "tests" in spec:
        return _asserts(spec, uid)
    if "test" in spec and "entry_point" in spec:
        return _check(spec, uid)
    raise ValueError("tests in no known shape (inputs/outputs, fn_name, test_list, or "
                     f"test + entry_point); keys {sorted(spec)[:6]}")


def _pairs(spec: dict) -> tuple[list, list]:
    inputs, outputs = spec["inputs"], spec["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
        raise ValueError("'inputs' and 'outputs' must be non-empty lists")
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    return inputs, outputs


def _stdio(spec: dict) -> dict:
    inputs, outputs = _pairs(spec)
    as_text = lambda x: x if isinstance(x, str) else "\n".join(map(str, x))
    return {"stdin": [as_text(x) for x in inputs], "expected_stdout": [as_text(x) for x in outputs]}


def _calls(spec: dict) -> dict:
    inputs, outputs = _pairs(spec)
    if not all(isinstance(x, list) for x in inputs):
        raise ValueError("call-based 'inputs' must be lists of arguments")
    return {"entry_point": str(spec["fn_name"]), "inputs": inputs, "expected": outputs,
            "unwrap_single": True}


def _literal_call(test: str, name: str | None):
    """(function name, args, expected) of `assert name(<literals>) == <literal>`, else None."""
    try:
        node = ast.parse(test.strip()).body
    except SyntaxError:
        return None
    if len(node) != 1 or not isinstance(node[0], ast.Assert):
        return None
    cmp = node[0].test
    if not (isinstance(cmp, ast.Compare) and len(cmp.ops) == 1 and isinstance(cmp.ops[0], ast.Eq)):
        return None
    for call, other in ((cmp.left, cmp.comparators[0]), (cmp.comparators[0], cmp.left)):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.keywords
                and (name is None or call.func.id == name)):
            try:
                args = [ast.literal_eval(a) for a in call.args]
                want = ast.literal_eval(other)
                return call.func.id, typed_json.encode(args), typed_json.encode(want)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
    return None


def _asserts(spec: dict, uid: str) -> dict:
    tests = spec.get("test_list", spec.get("tests"))
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise ValueError("'test_list' must be a non-empty list of assert statements")
    setup = str(spec.get("test_setup_code") or "")
    name = spec.get("entry_point")
    parsed = [_literal_call(t, name) for t in tests]
    names = {p[0] for p in parsed if p}
    if all(parsed) and len(names) == 1 and not setup.strip():
        return {"entry_point": names.pop(), "inputs": [p[1] for p in parsed],
                "expected": [p[2] for p in parsed], "typed": True}
    name = name or (names.pop() if len(names) == 1 else _called_and_defined(
        tests, spec.get("code", spec.get("reference"))))
    if not name:
        raise ValueError("cannot tell the function under test: give 'entry_point'")
    body = "".join(f"    {line}\n" for t in tests for line in t.strip().splitlines())
    test = f"{setup}\ndef check(candidate):\n    {name} = candidate\n{body}"
    return _check({"entry_point": name, "test": test, "prompt": "",
                   "canonical_solution": spec.get("code", spec.get("reference"))}, uid)


def _called_and_defined(tests: list, reference) -> str | None:
    """The one function the reference defines that the asserts call, else None."""
    try:
        defined = {n.name for n in ast.parse(str(reference or "")).body
                   if isinstance(n, ast.FunctionDef)}
        called = {n.func.id for t in tests for n in ast.walk(ast.parse(t.strip()))
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    both = defined & called
    return both.pop() if len(both) == 1 else None


def _check(spec: dict, uid: str) -> dict:
    reference = spec.get("canonical_solution", spec.get("reference"))
    if not reference:
        raise ValueError("these tests run on the host against recorded calls, which needs a "
                         "reference solution ('code', 'reference' or 'canonical_solution')")
    problem = {"task_id": uid, "prompt": str(spec.get("prompt", "")),
               "canonical_solution": str(reference), "test": str(spec["test"]),
               "entry_point": str(spec["entry_point"])}
    try:
        calls = host_check.record(problem)
    except Exception as e:  # the dataset's own test fails on its own reference
        raise ValueError(f"the tests fail on the row's reference solution: "
                         f"{type(e).__name__}: {str(e)[:100]}") from None
    if not calls:
        raise ValueError("the tests make no call of the function under test")
    return {"prefix": problem["prompt"], "entry_point": problem["entry_point"], "inputs": calls,
            "typed": True, "host_check": {"kind": "dataset", **problem}}
