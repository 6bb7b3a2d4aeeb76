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
                                 context): the first failure, or how many passed

A task's context for a call (`Task.tool_context`) reaches the implementation as keyword
arguments whose names start with `_`: no schema has such a key, so a model cannot set them.
"""

from __future__ import annotations

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
def tool(code, _entry_point="f", _inputs=(), _expected=()):
    scope = {}
    exec(code, scope)
    fn = scope.get(_entry_point)
    if not callable(fn):
        return "no function %s is defined" % _entry_point
    for args, want in zip(_inputs, _expected):
        got = fn(*args)
        if got != want:
            return "failed: %s(%s) returned %r, expected %r" % (
                _entry_point, ", ".join(map(repr, args)), got, want)
    return "passed %d visible tests" % len(_inputs)
''',
}

_TYPES = {"string": str, "array": list, "boolean": bool, "object": dict, "integer": int,
          "number": (int, float)}


def _short(x, n: int) -> str:
    text = repr(x) if not isinstance(x, str) else x
    return text if len(text) <= n else text[: n - 3] + "..."


def check_call(name, arguments, allowed) -> str:
    """'' when `name(**arguments)` is a valid call of an allowed tool, else why not (for the
    policy to read: an observation in a multi-turn episode)."""
    if not isinstance(name, str) or name not in SCHEMAS or name not in allowed:
        return f"tool {_short(name, 40)} is not available (allowed: {', '.join(allowed)})"
    if not isinstance(arguments, dict):
        return "the arguments must be a JSON object"
    schema = SCHEMAS[name]
    missing = [k for k in schema["required"] if k not in arguments]
    extra = [_short(k, 40) for k in arguments if k not in schema["properties"]]
    if missing or extra:
        return f"missing {missing} / unexpected {extra} arguments"
    for k, v in arguments.items():
        want = _TYPES[schema["properties"][k]["type"]]
        if not isinstance(v, want) or (want is not bool and isinstance(v, bool)):
            return f"argument {k!r} must be {schema['properties'][k]['type']}"
    return ""
