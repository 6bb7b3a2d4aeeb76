"""Tasks: the arithmetic task's disjoint seeded splits, pure training stream, typed verdicts
and demonstrations; every task satisfies the `Task` protocol the loop calls."""

import json
import re

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.tasks import registry
from rlvr_jax.tasks.arithmetic import ArithmeticTask, Problem, calculate
from rlvr_jax.tasks.base import in_heldout, repeat_each
from rlvr_jax.tasks.codegen import CodegenTask
from rlvr_jax.types import Status
from rlvr_jax.verify.trusted import TrustedVerifier, check_integer


def verify_all(task, problems, completions):
    return TrustedVerifier(check_integer).verify(task.verify_jobs(problems, completions))


def _is_heldout(task, question):
    return in_heldout(question, task.split_seed, task.heldout_fraction)


def test_calculate_precedence():
    assert calculate("3+4*5-2*3") == 17  # not ((3+4)*5-2)*3 = 99
    assert calculate("07-08") == -1 and calculate("12") == 12
    with pytest.raises(ValueError):
        calculate("3+")


@pytest.mark.parametrize("task", [ArithmeticTask(),
                                  ArithmeticTask(operators=("+", "-", "*"), max_operands=3),
                                  ArithmeticTask(zero_pad_operands=True, split_seed=7)])
def test_splits_are_disjoint_and_answers_correct(task):
    heldout = task.heldout_set(200)
    assert len({p.question for p in heldout}) == 200
    train = [p for i in range(20) for p in task.train_batch(seed=0, batch_index=i, count=64)]
    assert not {p.question for p in train} & {p.question for p in heldout}
    assert all(_is_heldout(task, p.question) for p in heldout)
    for p in train[:50] + heldout[:50]:
        # Independent reference: Python's own evaluator on the question without leading zeros.
        assert p.answer == eval(re.sub(r"\b0+(\d)", r"\1", p.question))


def test_held_out_fraction_is_respected():
    task = ArithmeticTask(heldout_fraction=0.1)
    everything = [f"{a}+{b}" for a in range(100) for b in range(100)]
    share = np.mean([_is_heldout(task, q) for q in everything])
    assert 0.085 < share < 0.115  # 10^4 expressions: binomial std 0.003


def test_training_stream_is_a_pure_function_of_seed_and_index():
    task = ArithmeticTask()
    assert task.train_batch(0, 5, 16) == task.train_batch(0, 5, 16)
    assert task.train_batch(0, 5, 16) != task.train_batch(0, 6, 16)
    assert task.train_batch(0, 5, 16) != task.train_batch(1, 5, 16)
    # The split depends on split_seed, not on the run seed.
    assert ArithmeticTask(split_seed=1).heldout_set(50) != task.heldout_set(50)


def test_zero_padding_and_prompt():
    task = ArithmeticTask(zero_pad_operands=True, prompt_template="Q: {question} A:")
    probs = task.train_batch(0, 0, 100)
    assert all(len(p.question) == 5 for p in probs)  # "dd+dd"
    assert task.prompt(Problem("07+88", 95)) == "Q: 07+88 A:"


def test_verdicts_are_typed():
    task = ArithmeticTask()
    p = Problem("40+2", 42)
    got = verify_all(task, [p] * 6, ["42", " 42 ", "41", "-42", "forty-two", ""])
    assert [v.status for v in got] == [Status.PASS, Status.PASS, Status.WRONG, Status.WRONG,
                                       Status.UNPARSEABLE, Status.UNPARSEABLE]
    assert "expected 42, got 41" in got[2].detail
    with pytest.raises(ValueError, match="2 problems but 1 completions"):
        verify_all(task, [p, p], ["42"])


def test_wrong_demonstrations_are_wrong_and_near():
    task = ArithmeticTask()
    rng = np.random.default_rng(0)
    for p in task.train_batch(0, 0, 200):
        assert task.demonstration(p, False, rng, 10) == str(p.answer)
        wrong = int(task.demonstration(p, True, rng, 10))
        assert wrong != p.answer and abs(wrong - p.answer) <= 10


def test_repeat_each_keeps_groups_contiguous():
    assert list(repeat_each("ab", 3)) == ["a", "a", "a", "b", "b", "b"]


def test_too_many_eval_problems_is_a_clear_error():
    with pytest.raises(ValueError, match="eval.num_problems"):
        ArithmeticTask(operand_digits=1).heldout_set(500)


@pytest.mark.parametrize("name", ["arithmetic", "codegen"])
def test_procedural_tasks_follow_the_protocol(name):
    """What the loop calls, through the one builder: a budget that covers every prompt, one
    job per pair, answers for voting, demonstrations, and splits that never meet."""
    task = tasks.build(registry.get(name).schema(), tokenizer=None)
    assert isinstance(task, ArithmeticTask if name == "arithmetic" else CodegenTask)
    budget = task.prompt_budget(len)  # characters stand in for tokens
    train = task.train_batch(0, 3, 64)
    heldout = task.heldout_set(40)
    assert not {task.key(p) for p in train} & {task.key(p) for p in heldout}
    assert max(len(task.prompt(p)) for p in train + heldout) <= budget
    jobs = task.verify_jobs(train[:3], ["1", "2", "3"])
    assert len(jobs) == 3 and all(j["completion"] == c for j, c in zip(jobs, "123"))
    with pytest.raises(ValueError, match="2 problems but 1 completions"):
        task.verify_jobs(train[:2], ["1"])
    assert task.answer_of("  7 ") == "7" and task.answer_of("   ") is None
    assert task.demonstration(train[0], False, np.random.default_rng(0), 5)


def test_procedural_loaders_read_standard_formats(tmp_path):
    """SQuAD JSON, and JSONL of SQL / logic tasks, with bad rows named by file:line."""
    from rlvr_jax.data.loaders import DatasetError

    schema = "CREATE TABLE t(name TEXT, age INT); INSERT INTO t VALUES ('a', 3), ('b', 5);"
    from rlvr_jax.tasks import procedural

    squad = {"data": [{"paragraphs": [{"context": "Oslo is in Norway.", "qas": [
        {"question": "Where is Oslo?", "answers": [{"text": "Norway"}]},
        {"question": "Unanswerable?", "answers": [], "is_impossible": True}]}]}]}
    (tmp_path / "squad.json").write_text(json.dumps(squad))
    jobs = procedural.load_squad(str(tmp_path / "squad.json"))
    assert jobs == [{"question": "Where is Oslo?", "document": "Oslo is in Norway.",
                     "answer": ["Norway"]}]
    (tmp_path / "sql.jsonl").write_text(json.dumps(
        {"question": "q", "schema": schema, "query": "SELECT name FROM t ORDER BY age DESC"})
        + "\n" + json.dumps({"question": "q", "schema": schema, "query": "SELECT nope FROM t"}))
    with pytest.raises(DatasetError, match="sql.jsonl:2: the gold query fails"):
        procedural.load_sql(str(tmp_path / "sql.jsonl"))
    (tmp_path / "logic.jsonl").write_text('{"premises": ["a", "a -> b"], "target": "b"}\n{}\n')
    with pytest.raises(DatasetError, match="logic.jsonl:2: missing field 'premises'"):
        procedural.load_logic(str(tmp_path / "logic.jsonl"))
