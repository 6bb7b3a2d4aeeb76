"""Environment modules read by the host (envs/world.py, envs/registry.py): schemas from typed
signatures, the hidden check cut out of what the session runs, and one clear line for each
kind of bad input (a module that does not parse, an untyped or oddly typed argument, ARTIFACTS
without a check, an unknown environment, a factory that cannot be imported)."""

import pytest

from rlvr_jax.config import ConfigError
from rlvr_jax.envs import registry, world


def _read(tmp_path, source):
    path = tmp_path / "my_env.py"
    path.write_text(source)
    return world.read("my_env", str(path)), str(path)


def test_tools_schemas_and_the_check_are_read_without_running_the_module(tmp_path):
    w, _ = _read(tmp_path, '''
import sqlite3
raise SystemExit("never run on the host")
ARTIFACTS = ["db.sqlite"]
def _helper():
    return 1
def setup(rows: list = ()):
    pass
def add(name: str, qty: int = 1, tags: list[str] = None, meta: dict = None, ok: bool = True,
        price: float = 0.0) -> str:
    """Add a row."""
    return name
def check(files, goal):
    return _helper() == 1
''')
    assert w.tools == ("add",) and w.artifacts == ("db.sqlite",)
    s = w.schemas["add"]
    assert s["required"] == ["name"] and s["description"] == "Add a row."
    assert {k: v["type"] for k, v in s["properties"].items()} == {
        "name": "string", "qty": "integer", "tags": "array", "meta": "object",
        "ok": "boolean", "price": "number"}
    assert "def check" not in w.session_source and "def add" in w.session_source
    assert "def check" in w.check_source and "def add" not in w.check_source
    assert "def setup" not in w.check_source and "def _helper" in w.check_source


@pytest.mark.parametrize("source, message", [
    ("def f(x):\n    pass\n", r"my_env.py:1: tool 'f' argument 'x' has no type annotation"),
    ("def f(x: set):\n    pass\n", r"my_env.py:1: tool 'f' argument 'x' has type 'set'"),
    ("def f(*xs: int):\n    pass\n", r"my_env.py:1: tool 'f' must take named arguments"),
    ("def f(_x: int):\n    pass\n", r"argument '_x': names starting with '_' are reserved"),
    ("def f(x: int)\n    pass\n", r"my_env.py:1: environment 'my_env' does not parse"),
    ("def _f():\n    pass\n", r"defines no tool"),
    ("ARTIFACTS = ['a']\ndef f():\n    pass\n", r"declares ARTIFACTS but no check"),
])
def test_a_bad_module_is_one_line_naming_the_file_and_line(tmp_path, source, message):
    with pytest.raises(ConfigError, match=message):
        _read(tmp_path, source)


def test_the_shipped_environments_and_bad_names():
    assert {"python_repl", "workspace", "api"} <= set(registry.worlds())
    for name in ("none", "tools", "python_repl", "workspace", "api",
                 "experiments.agentic.controls:off_by_one"):
        registry.check_kind(name)
    with pytest.raises(ConfigError, match=r"config key 'env.kind': unknown environment "
                                          r"'pyhton_repl' \(known: none, tools, api"):
        registry.check_kind("pyhton_repl")
    with pytest.raises(ConfigError, match=r"'env.kind': module 'no_such.module' cannot be "
                                          r"imported"):
        registry.factory("no_such.module:make")
    with pytest.raises(ConfigError, match=r"has no 'nope'"):
        registry.factory("rlvr_jax.envs.registry:nope")
