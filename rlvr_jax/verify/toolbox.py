"""The tools a policy may call: each a JSON schema (what the host validates a call against)
and an implementation (Python source run inside the sandbox with the model's arguments, as a
function `tool(**arguments)`). The single-call verifier (tools.py) and the multi-turn tool
environments (rlvr_jax/envs/) share them; a new tool is one entry in each dict.

  calculator {expression: str}   arithmetic over numbers: + - * / // % ** and parentheses,
                                 evaluated by an AST walker (no names, bounded exponents)
  python     {code: str}         runs the code; its stdout and the variable `result` come back
  sort       {items: array, descending?: bool}
  sql        {query: str}        a read-only query over the task's database (its schema and
                                 rows: the episode's context); up to 50 rows come back
  run_tests  {code: str}         the candidate program against the task's visible tests (the
                                 context): the first failure, or how many passed; the
                                 sandbox returns the function's values, the host compares

A task's context for a call (`Task.tool_context`) reaches the implementation as keyword
arguments whose names start with `_`: no schema has such a key, so a model cannot set them.
Each tool gets only the keys it declares (`CONTEXT`); expected values never enter the sandbox:
a tool's `FINISH` turns its returned value into the observation on the host.
"""

from __future__ import annotations

import json

SCHEMAS = {
    "calculator": {"type": "object", "required": ["expression"],
                   "properties": {"expression": {"type": "string"}}},
    "python": {"type": "object", "required": ["code"], "properties": {"code": {"type": "string"}}},
    "sort": {"type": "object", "required": ["items"],
             "properties": {"items": {"type": "array"}, "descending": {"type": "boolean"}}},
    "sql": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}},
    "run_tests": {"type": "object", "required": ["code"],
                  "properties": {"code": {"type": "string"}}},
}

# The tool implementations, run inside the sandbox with the model's arguments.
IMPLEMENTATIONS = {
    "calculator": '''
import ast, operator as op
_OPS = {ast.Add: op.add, ast.Sub: op.sub, ast.Mult: op.mul, ast.Div: op.truediv,
        ast.FloorDiv: op.floordiv, ast.Mod: op.mod, ast.Pow: op.pow, ast.USub: op.neg,
        ast.UAdd: op.pos}
def _ev(n):
    if isinstance(n, ast.Constant) and type(n.value) in (int, float):
        return n.value
    if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
        if isinstance(n.op, ast.Pow) and abs(_ev(n.right)) > 1000:
            raise ValueError("exponent too large")
        return _OPS[type(n.op)](_ev(n.left), _ev(n.right))
    if isinstance(n, ast.UnaryOp) and type(n.op) in _OPS:
        return _OPS[type(n.op)](_ev(n.operand))
    raise ValueError("not arithmetic")
def tool(expression):
    return _ev(ast.parse(expression, mode="eval").body)
''',
    "python": '''
def tool(code):
    scope = {}
    exec(code, scope)
    return scope.get("result")
''',
    "sort": '''
def tool(items, descending=False):
    return sorted(items, reverse=descending)
''',
    "sql": '''
import sqlite3
def tool(query, _schema=""):
    db = sqlite3.connect(":memory:")
    db.executescript(_schema)
    db.execute("PRAGMA query_only = ON")  # the database is read-only to the model
    return [list(row) for row in db.execute(query).fetchmany(50)]
''',
    "run_tests": '''
def tool(code, _entry_point="f", _inputs=()):
    scope = {}
    exec(code, scope)
    fn = scope.get(_entry_point)
    if not callable(fn):
        return {"missing": _entry_point}
    return {"returned": [fn(*args) for args in _inputs]}
''',
}

# The task's context keys each tool is given (`Task.tool_context`); a tool that declares none
# gets none (the python tool would raise on an argument it does not take). The expected
# values of run_tests are not here: they stay on the host, which compares (`finish`).
CONTEXT = {"sql": ("_schema",), "run_tests": ("_entry_point", "_inputs")}


def _run_tests_report(value, context: dict) -> str:
    """run_tests' report, made on the host from the values the candidate's function returned
    (JSON) and the task's expected values, which never enter the sandbox: no `__ne__` object,
    patched builtin or frame walk there can make wrong code pass."""
    from rlvr_jax.verify.code import same, short

    entry = str(context.get("_entry_point", "f"))
    if isinstance(value, dict) and set(value) == {"missing"}:
        return f"no function {short(entry, 80)} is defined"
    inputs, expected = list(context.get("_inputs", ())), list(context.get("_expected", ()))
    got = value.get("returned") if isinstance(value, dict) and len(value) == 1 else None
    if not isinstance(got, list) or len(got) != len(inputs):
        return "error: the tool's result is malformed"
    for args, out, want in zip(inputs, got, expected):
        if not same(out, json.loads(json.dumps(want)), 1e-9):
            return (f"failed: {entry}({', '.join(short(repr(a), 80) for a in args)}) "
                    f"returned {short(repr(out), 200)}, expected {short(repr(want), 200)}")
    return f"passed {len(inputs)} visible tests"


# Host-side finishing of a tool's returned value into what the policy reads, with the task's
# whole context (expected values included); a tool without one shows its value as it is.
FINISH = {"run_tests": _run_tests_report}

_TYPES = {"string": str, "array": list, "boolean": bool, "object": dict, "integer": int,
          "number": (int, float)}
_NAMES = {"string": "a string", "array": "an array", "boolean": "true or false",
          "object": "an object", "integer": "an integer", "number": "a number"}


def _short(x, n: int) -> str:
    text = repr(x) if not isinstance(x, str) else x
    return text if len(text) <= n else text[: n - 3] + "..."


def check_call(name, arguments, allowed, schemas=None) -> str:
    """'' when `name(**arguments)` is a valid call of an allowed tool, else why not (for the
    policy to read: an observation in a multi-turn episode). `schemas`: the environment's
    (tool -> JSON schema), the built-in tools' by default."""
    schemas = SCHEMAS if schemas is None else schemas
    if not isinstance(name, str) or name not in schemas or name not in allowed:
        return f"tool {_short(name, 40)} is not available (allowed: {', '.join(allowed)})"
    if not isinstance(arguments, dict):
        return "the arguments must be a JSON object"
    schema = schemas[name]
    missing = [k for k in schema.get("required", ()) if k not in arguments]
    extra = [_short(k, 40) for k in arguments if k not in schema["properties"]]
    if missing or extra:
        return f"missing {missing} / unexpected {extra} arguments"
    for k, v in arguments.items():
        want = _TYPES[schema["properties"][k]["type"]]
        if not isinstance(v, want) or (want is not bool and isinstance(v, bool)):
            return (f"argument {_short(k, 40)!r} must be "
                    f"{_NAMES[schema['properties'][k]['type']]}, not {type(v).__name__}")
    return ""
