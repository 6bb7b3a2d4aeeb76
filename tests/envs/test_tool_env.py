"""The tool environment with its tools in the bubblewrap sandbox: outputs and errors become
observations, bad calls are observations plus a count, and the code sandbox's attack suite,
run as python tool calls, is contained. Needs bubblewrap (a failure in CI, see helpers)."""

import os

import pytest

from rlvr_jax.envs import make_environment
from rlvr_jax.envs.base import MALFORMED, OK, SANDBOX_ERROR, TOOL_ERROR, UNKNOWN_TOOL
from tests.helpers import UNAVAILABLE
from tests.verify.test_sandbox import SANDBOX_ATTACKS

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sandbox"),
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]


@pytest.fixture(scope="module")
def env():
    os.environ["RLVR_SECRET"] = "hunter2"
    try:
        e = make_environment(["calculator", "python"], "hermes", workers=2, timeout_s=3.0,
                             batch_timeout_s=120.0, mode="forkserver",
                             turn_rewards={"malformed": -0.1, "unknown_tool": -0.2})
        yield e
        e.close()
    finally:
        del os.environ["RLVR_SECRET"]


def _call(env, tool, **arguments):
    return env.render_call(tool, arguments)


def test_outputs_and_errors_are_what_the_policy_reads(env):
    replies = env.respond([
        _call(env, "calculator", expression="123*456"),
        _call(env, "calculator", expression="1/0"),
        _call(env, "python", code="print('hi')\nresult = sum(range(10))"),
        _call(env, "python", code="while True: pass"),  # a tool that hangs
        _call(env, "python", code="print('x' * (10 << 20))"),  # a 10 MB output
        _call(env, "search", q="x"),
        '<tool_call>{"name": "calculator", "arguments": {"expression": 7}}</tool_call>',
        "<tool_call>{not json</tool_call>",
    ])
    got = [(r.outcome, r.text[:60]) for r in replies]
    assert got[0] == (OK, "56088")
    assert got[1] == (TOOL_ERROR, "error: ZeroDivisionError: division by zero")
    assert got[2] == (OK, "hi\n45")
    assert got[3] == (TOOL_ERROR, "error: the tool call timed out")
    assert got[4][0] == TOOL_ERROR and len(replies[4].text) < 25_000
    assert got[5][0] == UNKNOWN_TOOL and "not available" in got[5][1]
    assert got[6][0] == MALFORMED and "must be a string" in got[6][1]
    assert got[7][0] == MALFORMED and "not valid JSON" in got[7][1]
    assert {r.tool for r in replies[:5]} == {"calculator", "python"}
    # The per-turn reward table by outcome; outcomes it does not name get 0.
    assert [r.reward for r in replies] == [0.0] * 5 + [-0.2, -0.1, -0.1]


@pytest.mark.parametrize("name", list(SANDBOX_ATTACKS))
def test_the_code_sandbox_attacks_as_tool_calls_are_contained(env, name):
    program, _ = SANDBOX_ATTACKS[name]
    reply, = env.respond([_call(env, "python", code=program + "\nresult = f(0)")])
    assert reply.outcome in (OK, TOOL_ERROR), (reply.outcome, reply.text[:300])
    assert "hunter2" not in reply.text
    # The attack's success value is True; the secret's is checked above, and kill_parent's
    # success would be a dead worker (True means the worker survived; the next call shows it).
    if name not in ("trainer_env", "kill_parent"):
        assert reply.text.strip() != "true", reply.text[:300]
    assert not os.path.exists("/usr/pwned")
    after, = env.respond([_call(env, "calculator", expression="2+2")])
    assert (after.outcome, after.text) == (OK, "4")


def test_a_sandbox_that_cannot_start_is_the_episodes_sandbox_error(monkeypatch):
    from rlvr_jax.sandbox import bwrap

    e = make_environment(["calculator"], "tag", workers=1, timeout_s=2.0, batch_timeout_s=4.0,
                         mode="fresh")
    try:
        def broken(**kwargs):
            raise OSError("bwrap could not start")

        monkeypatch.setattr(bwrap, "spawn", broken)
        e._pool._workers = []  # the next call needs a new worker, which cannot start
        reply, = e.respond(["<calculator>1+1</calculator>"])
        assert reply.outcome == SANDBOX_ERROR
    finally:
        monkeypatch.undo()
        e.close()


def test_sql_and_run_tests_use_the_tasks_context():
    from rlvr_jax.tasks.codegen import CodegenTask, Spec

    e = make_environment(["sql", "run_tests"], "tag", workers=1, timeout_s=3.0,
                         batch_timeout_s=60.0, mode="forkserver")
    try:
        db = {"_schema": "CREATE TABLE t(a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x'), "
                         "(2, 'y');"}
        tests = CodegenTask().tool_context(Spec("*", 3, "+", 7))  # f(x) = 3x + 7
        replies = e.respond([
            "<sql>SELECT a, b FROM t ORDER BY a</sql>",
            "<sql>DELETE FROM t</sql>",  # read-only: the tool raises, the model sees it
            "<run_tests>def f(x):return x*3+7</run_tests>",
            "<run_tests>def f(x):return x*3+8</run_tests>",
            "<run_tests>def g(x):return 0</run_tests>",
        ], [db, db, tests, tests, tests])
        got = [(r.outcome, r.text) for r in replies]
        assert got[0] == (OK, "[[1, \"x\"], [2, \"y\"]]")
        assert got[1][0] == TOOL_ERROR and "readonly" in got[1][1]
        assert got[2] == (OK, "passed 2 visible tests")
        assert got[3] == (OK, "failed: f(0) returned 8, expected 7")
        assert got[4] == (OK, "no function f is defined")
        # A model cannot pass the context itself: `_schema` is no key of the tool's schema.
        from rlvr_jax.verify.toolbox import check_call

        assert "unexpected ['_schema']" in check_call(
            "sql", {"query": "SELECT 1", "_schema": "ATTACH ..."}, ["sql"])
    finally:
        e.close()


# Issue 36, 5: what made run_tests report "passed" for wrong code (f(x) = x is wrong for 3x+7)
RUN_TESTS_HACKS = {
    "__ne__": "class A:\n    def __ne__(self, o): return False\n    def __eq__(self, o): "
              "return True\ndef f(x): return A()",
    "builtins": "import builtins\nbuiltins.zip = lambda *a: iter(())\ndef f(x): return x",
    "frame": "import sys\ndef f(x):\n    fr = sys._getframe(1)\n    while fr and "
             "'_expected' not in fr.f_locals: fr = fr.f_back\n    return (fr.f_locals["
             "'_expected'][fr.f_locals.get('_inputs', [[x]]).index([x])] if fr else x)",
    "repr": "import builtins\nbuiltins.repr = lambda o: 'ok'\ndef f(x): return x",
}


def test_context_reaches_only_the_tools_that_declare_it_and_run_tests_cannot_be_fooled():
    """A task's context (here the codegen task's, with run_tests' keys) passed to python,
    calculator and sql made them raise TypeError; run_tests compared inside the sandbox,
    where the candidate's code could patch the comparison or read `_expected`."""
    from rlvr_jax.tasks.codegen import CodegenTask, Spec

    tests = CodegenTask().tool_context(Spec("*", 3, "+", 7))
    e = make_environment(["python", "calculator", "sql", "run_tests"], "tag", workers=1,
                         timeout_s=5.0, batch_timeout_s=60.0, mode="forkserver")
    try:
        texts = ["<python>print(6 * 7)</python>", "<calculator>6 * 7</calculator>",
                 "<sql>SELECT 42</sql>"] + [f"<run_tests>{c}</run_tests>"
                                           for c in RUN_TESTS_HACKS.values()]
        replies = e.respond(texts, [tests] * len(texts))
        got = [(r.outcome, r.text) for r in replies]
        assert got[:3] == [(OK, "42\n"), (OK, "42"), (OK, "[[42]]")], got[:3]
        for name, (outcome, text) in zip(RUN_TESTS_HACKS, got[3:]):
            assert "passed" not in text, (name, outcome, text)
    finally:
        e.close()
