"""An environment module, read (never imported) by the host.

A stateful environment is one Python module that runs inside the episode's sandbox session
(rlvr_jax/sandbox/session.py) under the system interpreter: standard library only, no
rlvr_jax. The host only parses it (`ast`), so nothing of it runs in the trainer:

    ARTIFACTS = ["answer.txt"]    # optional: files of the workspace read out at the end
    WORKSPACE = "/app"            # optional: the writable directory (default /tmp)

    def setup(n_rows: int = 3):   # optional: seeds the world from the task (runs first)
        ...

    def add_row(name: str, qty: int = 1) -> str:
        \"\"\"Add a row to the table.\"\"\"   # the docstring is the tool's description
        ...

    def check(files, goal):       # optional: the hidden final-state check
        return 1.0

Every other public top-level function is a tool: each argument annotated `str`, `int`,
`float`, `bool`, `list` or `dict` (optionally `list[...]` / `dict[...]`), which gives the
tool's JSON schema; a call is validated against it on the host, and a bad call is an
observation. `check(files, goal)` never enters the session: it is cut out of the source the
session runs and runs in a fresh verification sandbox on the ARTIFACTS copied out of the
session ({path: bytes}) and the task's hidden goal; it returns a score in [0, 1] (or a bool):
1 passes. `setup(**context["setup"])` seeds the world with the task's visible data.

A module that breaks these rules fails at load with one line naming the file, line and name.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from dataclasses import dataclass
from typing import Optional

from rlvr_jax.config.choices import ConfigError

RESERVED = ("setup", "check")
_SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc", "/proc", "/dev", "/opt",
                "/sys", "/run", "/var", "/root", "/home", "/boot", "/srv", "/mnt", "/media")
_ANNOTATIONS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
                "list": "array", "dict": "object"}


@dataclass(frozen=True)
class World:
    """What the host knows of an environment module."""

    name: str
    path: str
    session_source: str  # the module without `check`: what the session runs
    check_source: Optional[str]  # the module with `check` and no tools, or None without one
    schemas: dict  # tool -> JSON schema (with "description")
    artifacts: tuple[str, ...]
    workspace: str = "/tmp"  # the session's writable directory and the world's cwd

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(self.schemas)


def _where(path: str, node: ast.AST) -> str:
    return f"{path}:{getattr(node, 'lineno', 0)}"


def _type_of(path: str, fn: ast.FunctionDef, arg: ast.arg) -> str:
    ann = arg.annotation
    if ann is None:
        raise ConfigError(f"{_where(path, arg)}: tool {fn.name!r} argument {arg.arg!r} has no "
                          f"type annotation (one of {', '.join(_ANNOTATIONS)})")
    if isinstance(ann, ast.Subscript):  # list[int], dict[str, int]
        ann = ann.value
    name = ann.id if isinstance(ann, ast.Name) else None
    if name not in _ANNOTATIONS:
        raise ConfigError(f"{_where(path, arg)}: tool {fn.name!r} argument {arg.arg!r} has type "
                          f"{ast.unparse(arg.annotation)!r} (use one of "
                          f"{', '.join(_ANNOTATIONS)})")
    return _ANNOTATIONS[name]


def _schema(path: str, fn: ast.FunctionDef) -> dict:
    a = fn.args
    if a.vararg or a.kwarg or a.posonlyargs:
        raise ConfigError(f"{_where(path, fn)}: tool {fn.name!r} must take named arguments "
                          "only (no *args, **kwargs or positional-only ones)")
    args = a.args + a.kwonlyargs
    defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults) + list(
        a.kw_defaults)
    props, required = {}, []
    for arg, default in zip(args, defaults):
        if arg.arg.startswith("_"):
            raise ConfigError(f"{_where(path, arg)}: tool {fn.name!r} argument {arg.arg!r}: "
                              "names starting with '_' are reserved")
        props[arg.arg] = {"type": _type_of(path, fn, arg)}
        if default is None:
            required.append(arg.arg)
    return {"type": "object", "required": required, "properties": props,
            "description": (ast.get_docstring(fn) or "").strip()}


def read(name: str, path: str) -> World:
    """The environment module at `path`, checked (ConfigError naming file:line)."""
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise ConfigError(f"{path}:{e.lineno}: environment {name!r} does not parse: "
                          f"{e.msg}") from None
    except OSError as e:
        raise ConfigError(f"{path}: environment {name!r} cannot be read: {e}") from None
    schemas, check, artifacts, workspace = {}, None, (), "/tmp"
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef):
            raise ConfigError(f"{_where(path, node)}: tool {node.name!r} is async")
        if isinstance(node, ast.FunctionDef):
            if node.name == "check":
                check = node
            elif node.name != "setup" and not node.name.startswith("_"):
                schemas[node.name] = _schema(path, node)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "WORKSPACE" for t in node.targets):
            try:
                workspace = ast.literal_eval(node.value)
            except ValueError:
                workspace = None
            if not (isinstance(workspace, str) and re.fullmatch(r"/[a-z][a-z0-9_]*", workspace)
                    and workspace not in _SYSTEM_DIRS):
                raise ConfigError(f"{_where(path, node)}: WORKSPACE must be a new top-level "
                                  "directory such as '/app' (a literal)")
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "ARTIFACTS" for t in node.targets):
            try:
                artifacts = tuple(str(p) for p in ast.literal_eval(node.value))
            except (ValueError, TypeError):
                raise ConfigError(f"{_where(path, node)}: ARTIFACTS must be a literal list of "
                                  "paths") from None
    if not schemas:
        raise ConfigError(f"{path}: environment {name!r} defines no tool (a public top-level "
                          "function with typed arguments)")
    if artifacts and check is None:
        raise ConfigError(f"{path}: environment {name!r} declares ARTIFACTS but no "
                          "check(files, goal)")
    session = ast.Module([n for n in tree.body if n is not check], type_ignores=[])
    check_source = None
    if check is not None:
        # The check's box gets the module's imports, constants and private helpers, never
        # the tools or the setup (nothing of the session runs there).
        keep = [n for n in tree.body if not isinstance(n, ast.FunctionDef)
                or n is check or n.name.startswith("_")]
        check_source = ast.unparse(ast.Module(keep, type_ignores=[]))
    return World(name, path, ast.unparse(session), check_source, schemas, artifacts, workspace)


def module_path(module: str) -> str:
    """The source file of `module` (e.g. my_package.my_env), found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        raise ConfigError(f"environment module {module!r} cannot be found: {e}") from None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise ConfigError(f"environment module {module!r} cannot be found (is its package "
                          "installed?)")
    return spec.origin
