"""Dataset loaders (GSM8K, MATH, verl rows; JSONL and Parquet; errors name file:line), the
math verifier (extraction, equivalence, known math-verify misses) and its worker pool."""

import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr_jax.data import loaders
from rlvr_jax.types import Status
from rlvr_jax.verify import math as vmath
from rlvr_jax.verify.pool import VerifierPool

GSM = {"question": "Tom has 3 apples and gets 4. How many?", "answer": "3 + 4 = 7\n#### 7"}
MATH = {"problem": "Compute 1/2 + 1/4.", "solution": "It is $\\boxed{\\frac{3}{4}}$.",
        "type": "Algebra"}
VERL = {"data_source": "openai/gsm8k", "prompt": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "2+2?"}],
        "reward_model": {"style": "rule", "ground_truth": "4"}}


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_three_formats_from_jsonl_and_parquet(tmp_path):
    problems, skipped = loaders.load(_jsonl(tmp_path / "mix.jsonl", [GSM, MATH, VERL]))
    assert skipped == 0
    assert [p.answer for p in problems] == ["7", "\\frac{3}{4}", "4"]
    assert [p.data_source for p in problems] == ["mix", "Algebra", "openai/gsm8k"]
    assert problems[2].messages == (("system", "Be brief."), ("user", "2+2?"))
    assert problems[0].uid.endswith("mix.jsonl:1")
    pq.write_table(pa.Table.from_pylist([VERL, VERL]), tmp_path / "verl.parquet")
    parquet, _ = loaders.load(str(tmp_path / "verl.parquet"), fmt="verl")
    assert len(parquet) == 2 and parquet[1].uid.endswith("verl.parquet:2")


@pytest.mark.parametrize("bad,msg", [
    ("{not json", "not valid JSON"),
    (json.dumps({"question": "q", "answer": "no marker"}), "has no '#### <final answer>'"),
    (json.dumps({"problem": "p", "solution": "no box"}), "has no \\\\boxed"),
    (json.dumps({"data_source": "x", "prompt": [], "reward_model": {}}), "missing field"),
    (json.dumps({"text": "hello"}), "cannot tell the format"),
    (json.dumps([1, 2]), "expected a JSON object"),
])
def test_malformed_row_names_file_and_line_or_is_skipped(tmp_path, bad, msg):
    path = _jsonl(tmp_path / "d.jsonl", [GSM, bad, GSM])
    with pytest.raises(loaders.DatasetError, match=f"d.jsonl:2: .*{msg}"):
        loaders.load(path)
    problems, skipped = loaders.load(path, on_error="skip")
    assert len(problems) == 2 and skipped == 1  # the other rows are kept


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(loaders.DatasetError, match="nope.jsonl: file not found"):
        loaders.load(str(tmp_path / "nope.jsonl"))


@pytest.mark.parametrize("text,want", [
    ("so the answer is \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
    ("nested \\boxed{\\{1, \\{2\\}\\}}", "\\{1, \\{2\\}\\}"),
    ("work...\n#### 1,234\nextra", "1,234"),
    ("I think 3 then 42.5 apples", "42.5"),
    ("no digits", None),
])
def test_answer_extraction(text, want):
    assert vmath.extract_answer(text) == want


@pytest.mark.parametrize("gold,completion,status", [
    ("72", "#### 72", Status.PASS),
    ("0.5", "\\boxed{\\frac12}", Status.PASS),
    ("1000", "It is 1,000.", Status.PASS),
    ("\\{1,2\\}", "\\boxed{\\{2,1\\}}", Status.PASS),
    ("(0,1]", "\\boxed{(0,1]}", Status.PASS),
    ("\\frac{1}{2^{99}}", "\\boxed{2^{-99}}", Status.PASS),
    ("3", "\\boxed{4}", Status.WRONG),
    ("3", "I do not know", Status.UNPARSEABLE),
    # math-verify's known misses, rejected here:
    ("4", "\\boxed{4\\sqrt{2}}", Status.WRONG),
    ("\\frac{1}{2^{99}}", "\\boxed{\\frac{1}{2^{98}}}", Status.WRONG),
])
def test_math_equivalence(gold, completion, status):
    assert vmath.check(gold, completion).status == status


def test_pool_kills_hung_workers_retries_dead_ones_and_keeps_answering():
    with VerifierPool("test_sleep", workers=2, timeout_s=1.0) as pool:
        t0 = time.monotonic()
        got = pool.verify([{"seconds": 0.05}, {"seconds": 30}, {"die": True}, {"seconds": 0.1}])
        assert time.monotonic() - t0 < 1.0 + 1.0  # the call returns by its deadline (+1 s)
        assert [v.status for v in got] == [Status.PASS, Status.TIMEOUT, Status.SANDBOX_ERROR,
                                           Status.PASS]
        assert "died twice" in got[2].detail  # retried once on a fresh worker first
        assert pool.restarts == 3  # one kill for the hang, two for the deaths
        again = pool.verify([{"seconds": 0.01, "i": i} for i in range(6)])
        assert all(v.status == Status.PASS for v in again)
        fut = pool.submit([{"seconds": 0.01}])
        assert fut.result(timeout=10)[0].status == Status.PASS
        # A reply that is not a verdict: the worker is replaced, the job retried, then masked.
        garbled = pool.verify([{"garble": True}, {"seconds": 0.01, "i": 7}])
        assert [v.status for v in garbled] == [Status.SANDBOX_ERROR, Status.PASS]
        assert "malformed reply twice" in garbled[0].detail
        assert pool.restarts == 5
    with VerifierPool("test_sleep", workers=1, timeout_s=5.0, batch_timeout_s=0.5) as pool:
        t0 = time.monotonic()
        got = pool.verify([{"seconds": 3}, {"seconds": 0.01}])
        assert time.monotonic() - t0 < 1.5
        assert [v.status for v in got] == [Status.TIMEOUT, Status.TIMEOUT]


def test_math_pool_matches_in_process_and_caches():
    jobs = [{"gold": "7", "completion": "#### 7"}, {"gold": "7", "completion": "#### 8"},
            {"gold": "\\frac{3}{4}", "completion": "\\boxed{0.75}"}]
    with VerifierPool("math", workers=2) as pool:
        first = pool.verify(jobs)
        assert [v.status for v in first] == [vmath.check(j["gold"], j["completion"]).status
                                             for j in jobs]
        assert [v.status for v in pool.verify(jobs)] == [v.status for v in first]
        assert len(pool._cache) == 3
