"""The SQL, tool-use, logic and retrieval verifiers on hand-written cases."""

import pytest

from rlvr_jax.types import Status
from rlvr_jax.verify import logic, retrieval
from rlvr_jax.verify.pool import VerifierPool
from tests.test_sandbox import UNAVAILABLE

needs_sandbox = pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")
S = Status


@pytest.mark.parametrize("premises,target,claim,status", [
    (["p -> q", "q -> r", "p"], "r", "Conclusion: r", S.PASS),
    (["p -> q", "q -> r", "p"], "r", "Conclusion: q & r", S.PASS),  # stronger is fine
    (["p -> q", "q -> r", "p"], "r", "Conclusion: p | ~p", S.WRONG),  # tautology: no credit
    (["p -> q", "q -> r", "p"], "r", "Conclusion: p", S.WRONG),  # restating a premise
    (["p -> q"], None, "Conclusion: q", S.WRONG),  # not entailed
    (["a <-> b", "~b"], "~a", "therefore\nnot a", S.PASS),  # last line, word operators
    (["a ∨ b", "¬a"], "b", "Conclusion: b", S.PASS),  # unicode operators
    (["p -> q"], None, "Conclusion: q &", S.UNPARSEABLE),
])
def test_logic(premises, target, claim, status):
    assert logic.check({"premises": premises, "target": target,
                        "completion": claim}).status == status


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
])
def test_retrieval(completion, status):
    assert retrieval.check({"document": DOC, "answer": ["1889"],
                            "completion": completion}).status == status


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
