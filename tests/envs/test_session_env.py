"""Stateful environments (envs/session_env.py) on the shipped modules, with real sessions:
python_repl's state persists within an episode and never crosses episodes; the sandbox
attack corpus run as calls in sessions is contained and the next episodes are unaffected;
api's final-state verdict equals a reference computed independently; workspace's hidden
tests judge the final files and cannot be reached or forged from the session; bad calls
are observations. Needs bubblewrap (a failure in CI, see helpers)."""

import os

import pytest

from rlvr_jax.envs import make_session_environment
from rlvr_jax.envs.base import MALFORMED, OK, SANDBOX_ERROR, TOOL_ERROR
from rlvr_jax.sandbox.session import SessionLimits
from rlvr_jax.types import Status
from tests.helpers import UNAVAILABLE
from tests.verify.test_sandbox import SANDBOX_ATTACKS

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sandbox"),
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]

LIMITS = SessionLimits(call_s=1.5, output_bytes=4000)


def _env(name, call_format="hermes", limits=LIMITS, **options):
    return make_session_environment(name, call_format, limits=limits, max_live=64, spares=2,
                                    check_timeout_s=20.0, **options)


@pytest.fixture(scope="module")
def repl():
    os.environ["RLVR_SECRET"] = "hunter2"
    try:
        e = _env("python_repl", "tag")
        yield e
        e.close()
        assert e._sessions.leaked() == 0
    finally:
        del os.environ["RLVR_SECRET"]


def _py(env, code):
    return env.render_call("python", {"code": code})


def test_a_repl_keeps_its_state_within_an_episode_only(repl):
    a, b = repl.open([{}, {}])
    try:
        first = repl.step([a, b], [_py(repl, "x = 6 * 7\nprint('set')"), _py(repl, "1 +")])
        assert (first[0].outcome, first[0].text) == (OK, "set\n")
        assert first[1].outcome == TOOL_ERROR and "SyntaxError" in first[1].text
        second = repl.step([a, b], [_py(repl, "x"), _py(repl, "x")])
        assert (second[0].outcome, second[0].text) == (OK, "42")
        assert second[1].outcome == TOOL_ERROR and "NameError" in second[1].text
        assert repl.finish([a, b], ["", ""]) == [None, None]  # the task's verifier judges
    finally:
        repl.close_episodes([a, b])
    c, = repl.open([{}])
    try:
        assert "NameError" in repl.step([c], [_py(repl, "x")])[0].text
    finally:
        repl.close_episodes([c])
        repl.close_episodes([c])  # idempotent


def test_the_attack_corpus_in_sessions_is_contained_and_the_next_episodes_are_clean(repl):
    names = list(SANDBOX_ATTACKS)
    episodes = repl.open([{}] * len(names))
    try:
        replies = repl.step(episodes, [_py(repl, SANDBOX_ATTACKS[n][0] + "\nf(0)")
                                       for n in names])
        for name, reply in zip(names, replies):
            assert reply.outcome in (OK, TOOL_ERROR), (name, reply.outcome, reply.text[:200])
            assert "hunter2" not in reply.text, name
            if name not in ("trainer_env", "kill_parent"):
                assert reply.text.strip() != "True", (name, reply.text[:200])
        assert not os.path.exists("/usr/pwned")
        after = repl.step(episodes, [_py(repl, "2 + 2")] * len(names))
        assert [(r.outcome, r.text) for r in after] == [(OK, "4")] * len(names), [
            (n, r.text[:100]) for n, r in zip(names, after) if r.text != "4"]
    finally:
        repl.close_episodes(episodes)
    fresh = repl.open([{}] * 2)
    try:
        got = repl.step(fresh, [_py(repl, "import os\nsorted(os.listdir('/tmp'))")] * 2)
        assert [r.text for r in got] == ["[]", "[]"]
    finally:
        repl.close_episodes(fresh)


def test_bad_calls_are_observations(repl):
    e, = repl.open([{}])
    try:
        hermes = _env("python_repl", max_calls=1)
        try:
            wrong_type, unknown, garbled = hermes.step(
                [e] * 3, [hermes.render_call("python", {"code": 5}),
                          hermes.render_call("shell", {"cmd": "ls"}), "<tool_call>{</tool_call>"])
            h, = hermes.open([{}])
            first, spent = (hermes.step([h], [hermes.render_call("python", {"code": "1"})])[0]
                            for _ in range(2))
            assert first.text == "1" and "tool-call budget (1) is spent" in spent.text
            hermes.close_episodes([h])
        finally:
            hermes.close()
        assert wrong_type.outcome == MALFORMED and "must be a string, not int" in wrong_type.text
        assert unknown.outcome != SANDBOX_ERROR and "not available" in unknown.text
        assert garbled.outcome == MALFORMED
    finally:
        repl.close_episodes([e])


PRODUCTS = [["a1", "apple", 120, 5], ["b2", "bread", 300, 0], ["c3", "cheese", 900, 2]]


def _api_reference(calls):
    """The inventory's final rows after `calls`, computed without the environment."""
    rows = {p[0]: list(p) for p in PRODUCTS}
    for tool, args in calls:
        row = rows.get(args["sku"])
        if row is None:
            continue
        if tool == "restock" and args["quantity"] > 0:
            row[3] += args["quantity"]
        elif tool == "sell" and 0 < args["quantity"] <= row[3]:
            row[3] -= args["quantity"]
        elif tool == "set_price" and args["price"] >= 0:
            row[2] = args["price"]
    return [list(r) for r in rows.values()]


def test_the_api_final_state_verdict_equals_an_independent_reference():
    env = _env("api")
    calls = [("restock", {"sku": "b2", "quantity": 10}), ("sell", {"sku": "a1", "quantity": 9}),
             ("set_price", {"sku": "c3", "price": 850}), ("sell", {"sku": "zz", "quantity": 1}),
             ("sell", {"sku": "a1", "quantity": 2})]
    final = _api_reference(calls)
    wrong = [r[:3] + [r[3] + 1] if i == 0 else r for i, r in enumerate(final)]
    try:
        eps = env.open([{"setup": {"products": PRODUCTS}, "goal": {"products": final}},
                        {"setup": {"products": PRODUCTS}, "goal": {"products": wrong}},
                        {"setup": {"products": PRODUCTS}, "goal": {"products": final}}])
        for tool, args in calls:  # the third episode does nothing
            replies = env.step(eps[:2], [env.render_call(tool, args)] * 2)
            bad = args["sku"] == "zz" or args.get("quantity") == 9
            assert {r.outcome for r in replies} == {TOOL_ERROR if bad else OK}, replies
        got = env.finish(eps, [""] * 3)
        assert [v.status for v in got] == [Status.PASS, Status.WRONG, Status.WRONG], got
        # The check's named reward: the share of goal rows present as they should be.
        share = lambda goal, rows: len({tuple(r) for r in goal} & {tuple(r) for r in rows}) / len(
            goal)
        assert [dict(v.parts)["rows_right"] for v in got] == [
            1.0, share(wrong, final), share(final, PRODUCTS)]
        assert share(wrong, final) == (len(final) - 1) / len(final)
        env.close_episodes(eps)
    finally:
        env.close()
    assert env._sessions.leaked() == 0


WORKSPACE_TASK = {
    "setup": {"files": {"solution.py": "def add(a, b):\n    return a - b\n",
                        "test_visible.py": "from solution import add\nassert add(1, 1) == 2\n"
                                           "print('ok')\n"},
              "visible_tests": "test_visible.py"},
    "goal": {"module": "solution.py", "function": "add",
             "cases": [[[2, 3], 5], [[4, 0], 4], [[10, 5], 15]], "marker": "HIDDEN-7f3a"},
}


def test_workspace_hidden_tests_judge_the_final_files_and_cannot_be_reached_or_forged():
    env = _env("workspace", limits=SessionLimits(call_s=20.0))  # its file walk, under load
    fix = env.render_call("edit_file", {"path": "solution.py", "old": "a - b", "new": "a + b"})
    forge = env.render_call("write_file", {"path": "solution.py", "content":
                                           "import os\nos._exit(0)\ndef add(a, b):\n    return 0\n"})
    look = env.render_call("run", {"path": "look.py"})
    snoop = ("import os, json\nfound = []\nmark = ('HIDDEN-' + '7f3a').encode()\nfor top, dirs, names in os.walk('/'):\n"
             "    if top.startswith(('/proc', '/sys', '/usr', '/dev')): continue\n"
             "    for n in names:\n        try:\n"
             "            if mark in open(os.path.join(top, n), 'rb').read(1 << 20): "
             "found.append(n)\n        except Exception: pass\n"
             "found += [k for k, v in os.environ.items() if mark.decode() in v]\n"
             "print(json.dumps(found))\n")
    try:
        eps = env.open([WORKSPACE_TASK] * 3)
        tests, = env.step(eps[:1], [env.render_call("run_tests", {})])
        assert tests.outcome == OK and "AssertionError" in tests.text
        env.step(eps, [fix, forge, env.render_call("write_file", {"path": "look.py",
                                                                  "content": snoop})])
        tests, seen = env.step([eps[0], eps[2]], [env.render_call("run_tests", {}), look])
        assert "ok" in tests.text and "(exit code 0)" in tests.text
        assert seen.text.startswith("[]"), seen.text
        got = env.finish(eps, [""] * 3)
        assert got[0].status == Status.PASS and got[0].fraction == 1.0
        assert got[1].status == Status.WRONG  # exiting 0 at import passes nothing
        assert got[2].status == Status.WRONG and got[2].fraction == pytest.approx(1 / 3)
        env.close_episodes(eps)
    finally:
        env.close()
