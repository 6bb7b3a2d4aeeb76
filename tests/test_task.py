"""Arithmetic task: disjoint seeded splits, a pure training stream, typed verdicts, demos."""

import re

import numpy as np
import pytest

from rlvr_jax.tasks.arithmetic import ArithmeticTask, Problem, evaluate, repeat_each, verify_all
from rlvr_jax.types import Status


def test_evaluate_precedence():
    assert evaluate("3+4*5-2*3") == 17  # not ((3+4)*5-2)*3 = 99
    assert evaluate("07-08") == -1 and evaluate("12") == 12
    with pytest.raises(ValueError):
        evaluate("3+")


@pytest.mark.parametrize("task", [ArithmeticTask(),
                                  ArithmeticTask(operators=("+", "-", "*"), max_operands=3),
                                  ArithmeticTask(zero_pad_operands=True, split_seed=7)])
def test_splits_are_disjoint_and_answers_correct(task):
    heldout = task.heldout_set(200)
    assert len({p.question for p in heldout}) == 200
    train = [p for i in range(20) for p in task.train_batch(seed=0, batch_index=i, count=64)]
    assert not {p.question for p in train} & {p.question for p in heldout}
    assert all(task.is_heldout(p.question) for p in heldout)
    for p in train[:50] + heldout[:50]:
        # Independent reference: Python's own evaluator on the question without leading zeros.
        assert p.answer == eval(re.sub(r"\b0+(\d)", r"\1", p.question))


def test_held_out_fraction_is_respected():
    task = ArithmeticTask(heldout_fraction=0.1)
    everything = [f"{a}+{b}" for a in range(100) for b in range(100)]
    share = np.mean([task.is_heldout(q) for q in everything])
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
