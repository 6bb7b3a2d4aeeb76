"""warmstart.py directly: demonstrations are a pure function of their arguments, a stop
request abandons the warm-up with the way to resume said, and the start evaluation is
computed and logged once (a resumed run reads it back)."""

import json

import numpy as np
import pytest

from rlvr_jax import warmstart
from rlvr_jax.run_control import Stopped
from rlvr_jax.tasks.arithmetic import ArithmeticTask
from rlvr_jax.tokenizer import load_tokenizer, save_char_tokenizer


class _Tracker:
    def __init__(self):
        self.rows, self.lines = [], []

    def log(self, step, row):
        self.rows.append((step, row))

    def write(self, text):
        self.lines.append(text)


def test_demonstrations_are_pure_and_wrong_at_the_rate_asked(tmp_path):
    save_char_tokenizer(str(tmp_path))
    tok = load_tokenizer(str(tmp_path))
    make = lambda i, frac: warmstart.demonstration_batch(
        ArithmeticTask(), tok, seed=3, batch_index=i, count=256, wrong_fraction=frac,
        max_offset=10, prompt_len=8, max_new_tokens=5)
    a, b = make(7, 0.3), make(7, 0.3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.tokens_B_T, make(8, 0.3).tokens_B_T)
    right, noisy = make(7, 0.0), make(7, 0.3)
    differ = (right.tokens_B_T != noisy.tokens_B_T).any(axis=1).mean()
    assert 0.2 < differ < 0.4  # the same problems; ~30% of the answers moved


def test_a_stop_request_abandons_the_warm_up():
    steps = []

    def sft_step(state, batch):
        steps.append(batch)
        return state + 1, {"loss": 0.0}

    with pytest.raises(Stopped, match="at step 2 of 5; the rerun starts the warm-up again"):
        warmstart.run_warmup(sft_step, 0, lambda i: i, 5, lambda x: x, lambda i, m: None,
                             should_stop=lambda: len(steps) == 2)
    logged = []
    assert warmstart.run_warmup(sft_step, 0, lambda i: i, 5, lambda x: x,
                                lambda i, m: logged.append(i), log_every=2) == 5
    assert logged == [2, 4, 5]  # every log_every steps, and the last


def test_the_start_evaluation_is_computed_once(tmp_path):
    tracker, calls = _Tracker(), []
    evaluate = lambda: calls.append(1) or {"greedy_accuracy": 0.5, "sampled_accuracy": 0.25}
    first = warmstart.start_evaluation(str(tmp_path), tracker, evaluate)
    again = warmstart.start_evaluation(str(tmp_path), tracker, evaluate)
    assert first == again == {"greedy_accuracy": 0.5, "sampled_accuracy": 0.25} and calls == [1]
    assert tracker.rows == [(0, {"eval/greedy_accuracy": 0.5, "eval/sampled_accuracy": 0.25})]
    assert tracker.lines == ["eval before RL: greedy 0.500  sampled 0.250"]  # said once
    assert json.loads((tmp_path / "eval_start.json").read_text()) == first
