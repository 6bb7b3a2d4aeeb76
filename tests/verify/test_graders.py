"""Graders by kind (logic, retrieval, SQL, tool calls) and their generated tasks."""

import json

import pytest

from rlvr_jax.types import Status
from rlvr_jax.verify import logic, retrieval
from rlvr_jax.sandbox.pool import VerifierPool
from tests.helpers import UNAVAILABLE

pytestmark = pytest.mark.xdist_group("sandbox")  # one worker runs every sandbox test

needs_sandbox = pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")


S = Status


@pytest.mark.parametrize("premises,target,claim,status", [
    (["p -> q", "q -> r", "p"], "r", "Conclusion: r", S.PASS),
    (["p -> q", "q -> r", "p"], "r", "Conclusion: ~~r", S.PASS),
    (["p -> q", "q -> r", "p"], "r", "Conclusion: q & r", S.PASS),  # a derived fact beside it
    (["p -> q", "q -> r", "p"], "r", "Conclusion: p & q & ~~r", S.PASS),
    # the premises copied: they imply every target they entail
    (["p -> q", "q -> r", "p"], "r", "Conclusion: (p -> q) & (q -> r) & p", S.WRONG),
    (["p -> q", "q -> r", "p"], "r", "Conclusion: ~(~p | ~(p -> q) | ~(q -> r))", S.WRONG),
    (["a -> b", "b -> c"], "a -> c", "Conclusion: (a -> b) & (b -> c)", S.WRONG),
    (["a -> b", "b -> c"], "a -> c", "Conclusion: ~c -> ~a", S.PASS),
    (["a -> b", "b -> c"], "a -> c", "Conclusion: c", S.WRONG),  # not entailed
    (["p -> q", "q -> r", "p"], "r", "Conclusion: p | ~p", S.WRONG),  # tautology: no credit
    (["p -> q", "q -> r", "p"], "r", "Conclusion: p", S.WRONG),  # restating a premise
    (["p -> q"], None, "Conclusion: q", S.WRONG),  # not entailed
    (["p -> q", "p"], None, "Conclusion: q", S.PASS),
    (["p -> q", "p"], None, "Conclusion: q | ~q", S.WRONG),  # a tautology, target or not
    (["p -> q", "p"], None, "Conclusion: (r -> r) & T", S.WRONG),
    (["a <-> b", "~b"], "~a", "therefore\nnot a", S.PASS),  # last line, word operators
    (["a ∨ b", "¬a"], "b", "Conclusion: b", S.PASS),  # unicode operators
    (["p -> q"], None, "Conclusion: q &", S.UNPARSEABLE),
    # markup and punctuation around the claim, other spellings of the operators
    (["p -> q", "p"], "q", "Conclusion: q.", S.PASS),
    (["p -> q", "p"], "q", "**Conclusion:** q", S.PASS),
    (["p -> q", "p"], "q", "Conclusion: `q`", S.PASS),
    (["p -> q", "p"], "q", "Conclusion: $q$", S.PASS),
    (["a -> b", "b -> c"], "a -> c", "Conclusion: a => c.", S.PASS),
    (["a -> b", "b -> a"], "a <-> b", "Conclusion: a ⇔ b", S.PASS),
    (["p -> q", "p"], "q", "Conclusion: p.", S.WRONG),
    (["p -> q", "p"], "q", "Conclusion: .", S.UNPARSEABLE),
])
def test_logic(premises, target, claim, status):
    assert logic.check({"premises": premises, "target": target,
                        "completion": claim}).status == status


@pytest.mark.parametrize("claim,detail", [
    ("r", "'r' is entailed by the premises and implies the target"),
    ("r | ~r", "'r | ~r' is entailed by the premises but does not imply the target"),
    ("(q -> r) & r", "'(q -> r) & r' holds a part that is neither about the target nor a fact"),
    ("~r", "'~r' is not entailed by the premises"),
])
def test_logic_details_say_what_held(claim, detail):
    """Issue 38.10: a tautology was 'is not entailed and implies the target'."""
    got = logic.check({"premises": ["p -> q", "q -> r", "p"], "target": "r",
                       "completion": f"Conclusion: {claim}"}).detail
    assert got.startswith(detail), got


def test_logic_truth_table_against_brute_force():
    # (p -> q) -> r is not entailed by r -> p, but r & (p -> q) |= (p -> q) -> r.
    f = logic.parse("(p -> q) -> r")
    assert not logic.entails([logic.parse("r -> p")], f)
    assert logic.entails([logic.parse("r & (p -> q)")], f)
    assert logic.parse("a -> b -> c") == ("->", ("var", "a"), ("->", ("var", "b"), ("var", "c")))


DOC = "The Eiffel Tower is in Paris.\nIt was completed   in 1889 for the World's Fair."


@pytest.mark.parametrize("completion,status", [
    ('"It was completed in 1889" Answer: 1889', S.PASS),
    ('<quote>the eiffel tower is in paris</quote> "completed in 1889"\nAnswer: 1889.', S.PASS),
    ('"It was finished in 1889" Answer: 1889', S.WRONG),  # fabricated quote
    ('"It was completed in 1889" Answer: 1890', S.WRONG),
    ("Answer: 1889", S.UNPARSEABLE),  # no evidence
    ('"It was completed in 1889"\n**Answer:** **1889**', S.PASS),  # markdown
    ('"It was completed in 1889" Answer: `1889`', S.PASS),
    ('"It was completed in 1889" Answer: 1889 or 1890', S.WRONG),
])
def test_retrieval(completion, status):
    assert retrieval.check({"document": DOC, "answer": ["1889"],
                            "completion": completion}).status == status


@pytest.mark.parametrize("answer,gold,status", [
    ("the World's Fair", "World's Fair", S.PASS), ("a fair", "the fair", S.PASS),  # articles
    ("Paris", "paris", S.PASS), ("theatre", "atre", S.WRONG), ("The", "the", S.PASS),
    ("the", "fair", S.WRONG),
])
def test_retrieval_answers_compare_as_squad_exact_match(answer, gold, status):
    job = {"document": DOC, "answer": gold,
           "completion": f'"completed in 1889" Answer: {answer}'}
    assert retrieval.check(job).status == status


SCHEMA = "CREATE TABLE t(name TEXT, age INT); INSERT INTO t VALUES ('a', 3), ('b', 5), ('c', 5);"


@needs_sandbox
@pytest.mark.parametrize("query,ordered,status", [
    ("SELECT name FROM t WHERE age = 5", False, S.PASS),
    ("SELECT name FROM t WHERE age = 5 ORDER BY name DESC", False, S.PASS),  # multiset
    ("SELECT name FROM t WHERE age = 5 ORDER BY name DESC", True, S.WRONG),  # order matters
    ("```sql\nSELECT name FROM t WHERE age > 4;\n```", True, S.PASS),
    ("SELEC name", False, S.SYNTAX_ERROR),
    ("DELETE FROM t", False, S.RUNTIME_ERROR),  # read-only
    ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
     False, S.TIMEOUT),
])
def test_sql(query, ordered, status):
    with VerifierPool("sql", workers=1) as pool:
        v = pool.verify([{"completion": query, "schema": SCHEMA, "expected": [["b"], ["c"]],
                          "ordered": ordered}])[0]
    assert v.status == status, v.detail


@needs_sandbox
def test_tool_calls():
    def job(call, expected, tools=("calculator", "python", "sort")):
        return {"completion": call, "expected": expected, "tools": list(tools)}

    cases = [
        (job('Call: {"tool": "calculator", "arguments": {"expression": "(17+4)*3"}}', 63), S.PASS),
        (job('{"tool": "calculator", "arguments": {"expression": "__import__(\'os\')"}}', 63),
         S.RUNTIME_ERROR),
        (job('```json\n{"tool": "python", "arguments": {"code": "result = sum(range(10))"}}\n```',
             45), S.PASS),
        (job('{"tool": "python", "arguments": {"code": "result = 45"}}', 45, ("calculator",)),
         S.UNPARSEABLE),  # tool not offered
        (job('{"tool": "sort", "arguments": {"items": [3, 1, 2], "descending": "yes"}}',
             [3, 2, 1]), S.UNPARSEABLE),  # schema: boolean
        (job('{"tool": "sort", "arguments": {"items": [3, 1, 2], "descending": true}}',
             [3, 2, 1]), S.PASS),
        (job('{"tool": "sort", "arguments": {"items": [3, 1, 2]}}', [3, 2, 1]), S.WRONG),
        (job('{"tool": "python", "arguments": {"code": "while True: pass"}}', 1), S.TIMEOUT),
    ]
    with VerifierPool("tool", workers=2) as pool:
        got = pool.verify([j for j, _ in cases])
    assert [v.status for v in got] == [s for _, s in cases], [v.detail for v in got]


def _gold_completion(kind, job):
    """What a perfect policy would answer, to check generators against their verifiers."""
    if kind == "logic":
        return f"Conclusion: {job['target']}"
    if kind == "retrieval":
        year = job["answer"][0]
        sentence = next(s for s in job["document"].split(". ") if year in s)
        return f'"{sentence.split(" in ")[-1]}" Answer: {year}'
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["logic", "retrieval"])
def test_generated_tasks_are_solvable_and_not_trivially(kind):
    from rlvr_jax.tasks import procedural

    jobs = getattr(procedural, f"{kind}_tasks")(20, seed=0)
    check = logic.check if kind == "logic" else retrieval.check
    for job in jobs:
        assert check(dict(job, completion=_gold_completion(kind, job))).status == S.PASS
    assert check(dict(jobs[0], completion="Conclusion: p0 | ~p0" if kind == "logic"
                      else '"born in 1066" Answer: 1066')).status == S.WRONG
    if kind == "logic":  # naming the asked-about variable is right only when it is true
        named = [check(dict(j, completion="Conclusion: " + j["target"].lstrip("~"))).status
                 for j in jobs]
        assert 0 < named.count(S.PASS) < len(jobs), named


@needs_sandbox
def test_generated_sql_and_tool_tasks_score_gold_answers():
    from rlvr_jax.tasks import procedural

    sql_jobs = procedural.sql_tasks(6, seed=0)
    gold = ["SELECT name FROM people WHERE age > {} ORDER BY name".format(
        j["question"].split("older than ")[1].split(",")[0]) if j["ordered"] else
        "SELECT COUNT(*) FROM people WHERE city = '{}'".format(
            j["question"].split("live in ")[1].rstrip("?")) for j in sql_jobs]
    with VerifierPool("sql", workers=1) as pool:
        got = pool.verify([dict(j, completion=q) for j, q in zip(sql_jobs, gold)])
    assert all(v.status == S.PASS for v in got), [v.detail for v in got]
    tool_jobs = procedural.tool_tasks(4, seed=1)
    calls = []
    for j in tool_jobs:
        if j["tools"] == ["calculator"]:
            expr = j["question"].split("what is ")[1].rstrip("?")
            calls.append(json.dumps({"tool": "calculator", "arguments": {"expression": expr}}))
        else:
            items = json.loads(j["question"].split("sort ")[1].split(" in ")[0])
            calls.append(json.dumps({"tool": "sort", "arguments": {"items": items,
                                                                  "descending": True}}))
    with VerifierPool("tool", workers=1) as pool:
        got = pool.verify([dict(j, completion=c) for j, c in zip(tool_jobs, calls)])
    assert all(v.status == S.PASS for v in got), [v.detail for v in got]


@pytest.mark.parametrize("got,want,status", [
    ([[2]], [[2.0]], S.PASS), ([[2.0, "a"]], [[2, "a"]], S.PASS), ([[2.5]], [[2]], S.WRONG),
    ([["2"]], [[2]], S.WRONG), ([[None]], [[0]], S.WRONG), ([[1 / 3]], [[0.333333333]], S.PASS),
])
def test_sql_cells_compare_as_python_compares_numbers(got, want, status):
    """An integral float equals its int (2.0 == 2: `AVG` and an integer expression give
    either), floats to 9 decimals; a string is no number and NULL no zero."""
    from rlvr_jax.verify import sql

    reply = {"status": "ok", "outputs": [{"value": got}]}
    assert sql.verdict({"expected": want}, reply).status == status
