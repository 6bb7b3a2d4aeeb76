"""`eval` and `exec` of untrusted text in a grandchild process that returns data, never control.

Why: several reasoning-gym scorers read the answer with `eval` (spiral_matrix, n_queens,
binary_matrix, string_insertion, number_sorting) or sympy's `parse_expr` (countdown, puzzle24,
the integration and polynomial datasets), which ends in `eval`. Run in the process that
reports the score, an answer that is a Python expression could write its own "score 1.0" to
the result pipe and exit: a forged PASS. So, while a scorer reads an answer (`guarded()`),
`builtins.eval` and `builtins.exec` run the text in a process forked for it, which first closes
every descriptor but its own pipe (it cannot reach the result pipe), evaluates, and writes the
value back as tagged JSON (`encode`). The scorer's process rebuilds the value from that data
alone (`decode`): None, bool, int, float, complex, str, bytes, list, tuple, dict, set,
frozenset, and sympy expressions rebuilt from their `srepr` by an AST walk that only calls
sympy classes on literals (`from_srepr`); anything else, anything malformed, deeper than
MAX_DEPTH or larger than MAX_BYTES is an exception in the scorer (its usual "wrong answer"
path). An exception in the evaluation comes back as a builtin exception of the same name (a
`SyntaxError` stays a `SyntaxError`), others as `ValueError`. So the only thing candidate text
can give the scorer is a value, and the score is computed by code it never ran in.

What is not routed: calls from the standard library's own code generators (`_TRUSTED_CALLERS`:
namedtuple, dataclasses, typing's forward references, enum, the import system executing a
module's body), which compile text they wrote themselves, never an answer, and an `exec` of
import statements only (sympy's `parse_expr` fills its namespace with `from sympy import *`). The guard replaces
the builtins, so it covers every caller that looks `eval` up when it runs (reasoning-gym's and
sympy's do); a library that kept its own reference to `eval` from before would bypass it, which
is why the scorer's process is still a sandboxed child and its result still checked by the
worker. The grandchild lives inside the same sandbox and limits; it can kill or stop its
parent, which ends as the job's runtime error or timeout, never as a score.

Standalone (stdlib, sympy only when a value is a sympy expression): this file's source is part
of the program the sandbox runs (gym_score.PROGRAM), and the host tests import it directly.
"""

import ast
import builtins
import contextlib
import json
import os
import select
import signal
import sys

MAX_BYTES = 1 << 20  # of one evaluation's encoded value
MAX_DEPTH = 100  # nesting of containers (and of sympy calls) in a value

_REAL_EVAL, _REAL_EXEC = builtins.eval, builtins.exec
_TRUSTED_CALLERS = ("collections", "dataclasses", "typing", "enum", "functools",
                    "importlib._bootstrap", "importlib._bootstrap_external")
_EXCEPTIONS = {name: obj for name, obj in vars(builtins).items()
               if isinstance(obj, type) and issubclass(obj, Exception)}
_state = {"decoding": False, "limit": None}
# How an evaluation that died without a value ended: the job's limit, not a wrong answer.
_LIMIT_SIGNALS = {signal.SIGXCPU: "timeout", signal.SIGXFSZ: "output_limit",
                  signal.SIGKILL: "memory_limit"}  # SIGKILL: the OOM killer (or itself)


class EvaluationLimit(BaseException):
    """An evaluation hit a resource limit (`status`: timeout, memory_limit, output_limit).
    A BaseException, so that a scorer's `except Exception` does not score it as a wrong
    answer; `limit_hit()` reports it even if a scorer swallows everything."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


def _limit(status):
    _state["limit"] = status
    raise EvaluationLimit(status)


def limit_hit():
    """The limit an evaluation hit inside the last `guarded()` block, else None."""
    return _state["limit"]


# ----------------------------------------------------------------------------- data codec
def encode(value, depth=0):
    """A value as tagged JSON (in the grandchild; what it writes is untrusted all the same)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return {"i": str(int(value))}
    if isinstance(value, float):  # numpy's float64 is one: repr the plain float
        return {"f": repr(float(value))}
    if isinstance(value, complex):
        return {"c": [repr(value.real), repr(value.imag)]}
    if isinstance(value, bytes):
        return {"b": value.decode("latin-1")}
    for tag, kind in (("l", list), ("t", tuple), ("s", set), ("fs", frozenset)):
        if isinstance(value, kind):
            return {tag: [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    sympy = sys.modules.get("sympy")
    if sympy is not None and isinstance(value, sympy.Basic):
        return {"sym": sympy.srepr(value)}
    raise TypeError(f"an evaluated answer of type {type(value).__name__} is not data")


def _depth_ok(value):
    """Nesting of parsed JSON within MAX_DEPTH, counted without recursion."""
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            if d > 2 * MAX_DEPTH + 2:  # each tagged container is two JSON levels
                return False
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return True


def decode(raw):
    """The value `encode` described, rebuilt from the bytes a grandchild wrote; ValueError
    (or TypeError) for anything that is not such a description."""
    if len(raw) > MAX_BYTES:
        raise ValueError("evaluated answer too large")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, MemoryError) as e:
        raise ValueError(f"malformed evaluation result ({type(e).__name__})") from None
    return rebuild(data)


def rebuild(data):
    """`decode` for already parsed JSON."""
    if not _depth_ok(data):
        raise ValueError("evaluated answer nested too deeply")
    try:
        return _build(data)
    except RecursionError:
        raise ValueError("evaluated answer nested too deeply") from None


def _build(x):
    if x is None or isinstance(x, (bool, str)):
        return x
    if not (isinstance(x, dict) and len(x) == 1):
        raise ValueError("malformed evaluation result")
    (tag, v), = x.items()
    if tag == "i" and isinstance(v, str):
        return int(v)
    if tag == "f" and isinstance(v, str):
        return float(v)
    if tag == "c" and isinstance(v, list) and len(v) == 2 and all(isinstance(p, str) for p in v):
        return complex(float(v[0]), float(v[1]))
    if tag == "b" and isinstance(v, str):
        return v.encode("latin-1")
    if tag == "sym" and isinstance(v, str):
        return from_srepr(v)
    if not isinstance(v, list):
        raise ValueError("malformed evaluation result")
    if tag == "d":
        if not all(isinstance(p, list) and len(p) == 2 for p in v):
            raise ValueError("malformed evaluation result")
        return {_build(k): _build(w) for k, w in v}
    kinds = {"l": list, "t": tuple, "s": set, "fs": frozenset}
    if tag not in kinds:
        raise ValueError("malformed evaluation result")
    return kinds[tag](_build(w) for w in v)


_SYMPY_NAMES = ("oo", "zoo", "nan", "pi", "E", "I", "EulerGamma", "Catalan", "GoldenRatio",
                "TribonacciConstant", "true", "false")


def from_srepr(text):
    """A sympy expression from its `srepr`, by walking its syntax tree: calls of sympy
    classes (Basic subclasses, `Function('f')` applied) on literals, tuples and lists of them,
    and sympy's named constants. Never `eval`; and while it builds, a sympy constructor that
    would parse a string (and so evaluate it) raises instead (`_state['decoding']`)."""
    import sympy

    if len(text) > MAX_BYTES:
        raise ValueError("expression too large")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ValueError(f"malformed expression ({type(e).__name__})") from None

    def cls(name):
        obj = getattr(sympy, name, None) if isinstance(name, str) else None
        if isinstance(obj, type) and issubclass(obj, sympy.Basic):
            return obj
        raise ValueError(f"{name!r} is not a sympy class")

    def build(node, depth):
        if depth > MAX_DEPTH:
            raise ValueError("expression nested too deeply")
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
            return node.value
        if isinstance(node, ast.Constant) and node.value is None:
            return None
        if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
                and isinstance(node.operand, ast.Constant)
                and type(node.operand.value) in (int, float)):
            return -node.operand.value
        if isinstance(node, ast.Name) and node.id in _SYMPY_NAMES:
            return getattr(sympy, node.id)
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [build(e, depth + 1) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                fn = cls(node.func.id)
            else:  # Function('f')(x): an undefined function, then applied
                fn = build(node.func, depth + 1)
                if not (isinstance(fn, type) and issubclass(fn, sympy.Basic)):
                    raise ValueError("only sympy classes are called")
            args = [build(a, depth + 1) for a in node.args]
            kwargs = {k.arg: build(k.value, depth + 1) for k in node.keywords
                      if isinstance(k.arg, str)}
            if len(kwargs) != len(node.keywords):
                raise ValueError("malformed expression")
            return fn(*args, **kwargs)
        raise ValueError(f"{type(node).__name__} is not part of an expression")

    _state["decoding"] = True
    before = builtins.eval, builtins.exec
    # Guarded or not, no text is evaluated here (but the import system's own module bodies).
    builtins.eval, builtins.exec = _refusing(_REAL_EVAL), _refusing(_REAL_EXEC)
    try:
        return build(tree, 0)
    except RecursionError:
        raise ValueError("expression nested too deeply") from None
    finally:
        builtins.eval, builtins.exec = before
        _state["decoding"] = False


def _refusing(real):
    def refuse(source, globals=None, locals=None, **kwargs):
        g, l = _scopes(globals, locals)
        if _trusted_caller():
            return real(source, g, l, **kwargs)
        raise ValueError("no evaluation while an evaluated answer is rebuilt")
    return refuse


# ----------------------------------------------------------------------------- isolation
def _in_grandchild(run):
    """Fork; in the grandchild close every descriptor but 0-2 and its pipe, restore the real
    builtins, call `run()` and write its encoded value (or its exception's name); in this
    process read that (bounded) and rebuild it. Never trusts a byte of it."""
    if _state["decoding"]:
        raise ValueError("no evaluation while an evaluated answer is rebuilt")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the grandchild: nothing of the parent's reachable but this pipe
        try:
            os.closerange(3, w)
            os.closerange(w + 1, os.sysconf("SC_OPEN_MAX"))
            builtins.eval, builtins.exec = _REAL_EVAL, _REAL_EXEC
            try:
                out = {"value": encode(run())}
            except BaseException as e:  # noqa: BLE001 - reported by name, as data
                out = {"raise": type(e).__name__, "message": str(e)[:200]}
            data = json.dumps(out).encode()
            while data:
                data = data[os.write(w, data):]
        finally:
            os._exit(0)
    os.close(w)
    raw = bytearray()
    try:
        pidfd = os.pidfd_open(pid)
        exited = False
        while not exited or select.select([r], [], [], 0)[0]:
            readable = select.select([r, pidfd], [], [])[0]
            if pidfd in readable:
                exited = True  # take what is there; leftovers may hold the pipe open
            if r in readable:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                raw += chunk
                if len(raw) > MAX_BYTES + 64:
                    raise ValueError("evaluated answer too large")
        os.close(pidfd)
    finally:
        os.close(r)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = 0
    if not raw and os.WIFSIGNALED(status) and os.WTERMSIG(status) in _LIMIT_SIGNALS:
        _limit(_LIMIT_SIGNALS[os.WTERMSIG(status)])
    try:
        msg = json.loads(bytes(raw).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        raise ValueError("the evaluation ended without a result") from None
    if not (isinstance(msg, dict) and len(msg) in (1, 2)):
        raise ValueError("malformed evaluation result")
    if "raise" in msg:
        name, text = msg.get("raise"), msg.get("message")
        if name == "MemoryError":
            _limit("memory_limit")
        kind = _EXCEPTIONS.get(name) if isinstance(name, str) else None
        text = text if isinstance(text, str) else ""
        if kind is None or not _plain(kind):
            raise ValueError(f"the evaluation raised {str(name)[:40]}: {text}")
        raise kind(text)
    if "value" not in msg:
        raise ValueError("malformed evaluation result")
    return rebuild(msg["value"])


def _plain(kind):
    """Whether `kind(message)` builds the builtin exception (some need other arguments)."""
    try:
        kind("x")
        return True
    except Exception:  # noqa: BLE001
        return False


def _trusted_caller():
    name = sys._getframe(2).f_globals.get("__name__", "")
    return any(name == m or name.startswith(m + ".") for m in _TRUSTED_CALLERS)


def _scopes(globals, locals):
    """The caller's scopes when none are given, as the builtins would take them."""
    if globals is None:
        frame = sys._getframe(2)
        globals = frame.f_globals
        locals = frame.f_locals if locals is None else locals
    return globals, globals if locals is None else locals


def isolated_eval(source, globals=None, locals=None):
    g, l = _scopes(globals, locals)
    if _trusted_caller():
        return _REAL_EVAL(source, g, l)
    return _in_grandchild(lambda: _REAL_EVAL(source, g, l))


def _imports_only(source):
    """Whether `source` is text made only of import statements (sympy's parse_expr runs
    `from sympy import *` into its namespace): importing installed modules by name runs no
    candidate text, and its names must land in the caller's namespace."""
    if not isinstance(source, str) or len(source) > 10_000:
        return False
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in body)


def isolated_exec(source, globals=None, locals=None, **kwargs):
    g, l = _scopes(globals, locals)
    if _trusted_caller() or _imports_only(source):
        return _REAL_EXEC(source, g, l, **kwargs)
    _in_grandchild(lambda: _REAL_EXEC(source, g, l, **kwargs))
    return None  # what it defined stays in the grandchild


@contextlib.contextmanager
def guarded():
    """While inside: `eval` and `exec` run in a grandchild and return data only."""
    _state["limit"] = None
    builtins.eval, builtins.exec = isolated_eval, isolated_exec
    try:
        yield
    finally:
        builtins.eval, builtins.exec = _REAL_EVAL, _REAL_EXEC
