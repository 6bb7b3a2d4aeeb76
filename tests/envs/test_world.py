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
                                          r"'pyhton_repl' \(known: none, tools, routed, api"):
        registry.check_kind("pyhton_repl")
    with pytest.raises(ConfigError, match=r"'env.kind': module 'no_such.module' cannot be "
                                          r"imported"):
        registry.factory("no_such.module:make")
    with pytest.raises(ConfigError, match=r"has no 'nope'"):
        registry.factory("rlvr_jax.envs.registry:nope")


@pytest.mark.xdist_group("sandbox")
def test_the_documented_example_environment_works_as_written(tmp_path, monkeypatch):
    """conf/README.md's kv_env module, as written: read, registered by name, its calls run in
    sessions (state kept, a bad key an observation), its final state judged by its check in
    a fresh box (a goal met passes, another fails)."""
    import re

    from rlvr_jax.config import conf_dir
    from rlvr_jax.envs import make_session_environment
    from rlvr_jax.envs.base import OK, TOOL_ERROR
    from rlvr_jax.sandbox.session import SessionLimits
    from rlvr_jax.types import Status
    from tests.helpers import UNAVAILABLE

    if UNAVAILABLE:
        pytest.skip(UNAVAILABLE)
    text = open(f"{conf_dir()}/README.md").read()
    code = re.search(r"```python\n# my_package/kv_env.py[^\n]*\n(.*?)```", text, re.S).group(1)
    (tmp_path / "kv_env.py").write_text(code)
    monkeypatch.setitem(registry._cache, "paths", dict(registry.worlds(),
                                                       kv=str(tmp_path / "kv_env.py")))
    registry.check_kind("kv")
    env = make_session_environment("kv", "hermes", limits=SessionLimits(), spares=1)
    try:
        eps = env.open([{"setup": {"initial": {"a": "1"}}, "goal": {"store": {"a": "1", "b": "2"}}},
                        {"setup": {}, "goal": {"store": {"b": "2"}}}])
        put = env.step(eps, [env.render_call("put", {"key": "b", "value": "2"})] * 2)
        got = env.step(eps, [env.render_call("get", {"key": "a"})] * 2)
        assert [r.outcome for r in put] == [OK, OK]
        assert (got[0].outcome, got[0].text) == (OK, "1") and got[1].outcome == TOOL_ERROR
        assert [v.status for v in env.finish(eps, ["", ""])] == [Status.PASS, Status.PASS]
        env.close_episodes(eps)
        other = env.open([{"setup": {}, "goal": {"store": {"b": "3"}}}])
        env.step(other, [env.render_call("put", {"key": "b", "value": "2"})])
        assert env.finish(other, [""])[0].status == Status.WRONG
        env.close_episodes(other)
    finally:
        env.close()


def test_mixed_rows_name_their_environment_and_bad_names_are_their_lines(tmp_path):
    import json

    from rlvr_jax.data.loaders import DatasetError
    from rlvr_jax.tasks.mixed import MixedTask, parse_row

    row = {"prompt": "sell every apple", "environment": "api",
           "environment_context": {"setup": {"products": [["a1", "apple", 1, 5]]},
                                   "goal": {"products": [["a1", "apple", 1, 0]]}}}
    p = parse_row(row, "f.jsonl:3", "", {}, set())
    assert p.kind == "exact" and MixedTask.tool_context(p) == {
        **row["environment_context"], "environment": "api"}
    plain = parse_row({"prompt": "2+2", "kind": "exact", "answer": "4"}, "f.jsonl:4", "", {},
                      set())
    assert MixedTask.tool_context(plain) == {}
    with pytest.raises(DatasetError, match=r"f.jsonl:5: unknown environment 'apy'"):
        parse_row(dict(row, environment="apy"), "f.jsonl:5", "", {}, set())
    with pytest.raises(DatasetError, match=r"f.jsonl:6: 'environment_context' must be"):
        parse_row(dict(row, environment_context={"goals": 1}), "f.jsonl:6", "", {}, set())
    assert json.loads(p.env_context)["goal"]["products"][0][3] == 0


@pytest.mark.xdist_group("sandbox")
def test_a_routed_environment_sends_each_episode_to_its_own():
    from rlvr_jax.config import EnvConfig
    from rlvr_jax.build import environment
    from rlvr_jax.types import Status
    from tests.helpers import UNAVAILABLE

    if UNAVAILABLE:
        pytest.skip(UNAVAILABLE)
    e = EnvConfig(kind="routed", routes=["python_repl", "api"], call_format="hermes")
    e.check()
    env = environment(e)
    try:
        goal = {"products": [["a1", "apple", 1, 0]]}
        eps = env.open([{}, {"environment": "api", "setup": {"products": [["a1", "apple", 1, 5]]},
                             "goal": goal}])
        assert [ep.route for ep in eps] == ["python_repl", "api"]
        replies = env.step(eps, [env.render_call("python", {"code": "6 * 7"}),
                                 env.render_call("sell", {"sku": "a1", "quantity": 5})])
        assert [r.text for r in replies][0] == "42" and '"stock": 0' in replies[1].text
        wrong_route = env.step(eps[:1], [env.render_call("sell", {"sku": "a1", "quantity": 1})])
        assert "not available" in wrong_route[0].text
        got = env.finish(eps, ["", ""])
        assert got[0] is None and got[1].status == Status.PASS
        env.close_episodes(eps)
        assert env.stats()["session/api/opened"] == 1.0
    finally:
        env.close()
    with pytest.raises(ConfigError, match=r"env.routes\[1\]': unknown environment 'apy'"):
        EnvConfig(kind="routed", routes=["python_repl", "apy"]).check()


def test_a_final_state_checks_named_rewards_are_read_defensively():
    """world_check's verdict from a check's reply: a score with parts gives Verdict.parts
    (sorted pairs); parts that are not a small dict of short names to finite numbers, or a
    score that is not one, are the agent's WRONG, never an exception."""
    from rlvr_jax.envs import world_check
    from rlvr_jax.types import Status

    reply = lambda value: {"status": "ok", "outputs": [{"value": value}]}
    v = world_check.verdict({}, reply({"score": 0.5, "parts": {"b": 2, "a": 0.25}}))
    assert v.status == Status.WRONG and v.fraction == 0.5 and v.parts == (("a", 0.25),
                                                                           ("b", 2.0))
    assert world_check.verdict({}, reply({"score": 1, "parts": {}})).status == Status.PASS
    for bad in ({"score": 1, "parts": {"a": float("nan")}}, {"score": 1, "parts": [1]},
                {"score": 1, "parts": {str(i): 1 for i in range(17)}},
                {"score": 1, "parts": {"x" * 65: 1}}, {"score": "1"}, {"parts": {}}):
        got = world_check.verdict({}, reply(bad))
        assert got.status == Status.WRONG and got.parts == (), (bad, got)
