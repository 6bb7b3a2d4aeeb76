"""reasoning-gym as a task (tasks/gym.py): the training stream a pure function of (seed,
batch), held-out questions disjoint from every training batch, prompts within the budget,
demonstrations in the answer tag, and one clear error per bad dataset entry. Scoring in the
sandbox: tests/verify/test_gym_score.py."""

import re

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.config import ConfigError
from rlvr_jax.tasks.gym import GymDatasetConfig, ReasoningGymTaskConfig, answer_in_tag


@pytest.fixture(autouse=True, scope="module")
def _reasoning_gym():  # imported by the first test, not at collection (~1.4 s a worker)
    pytest.importorskip("reasoning_gym", reason="the optional extra: pip install -e '.[tasks]'")


MIX = [GymDatasetConfig("chain_sum", 2.0, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                             "max_digits": 1}),
       GymDatasetConfig("spell_backward", 1.0, {"min_word_len": 3, "max_word_len": 4})]


def _task(**kw):
    return tasks.build(ReasoningGymTaskConfig(datasets=MIX, **kw), tokenizer=None)


def test_the_stream_is_a_pure_function_of_seed_and_batch_and_heldout_is_disjoint():
    task = _task(heldout_fraction=0.2)
    assert task.train_batch(3, 7, 16) == task.train_batch(3, 7, 16)
    assert task.train_batch(3, 7, 16) != task.train_batch(3, 8, 16)
    held = {task.key(p) for p in task.heldout_set(40)}
    assert len(held) == 40
    seen = {task.key(p) for k in range(60) for p in task.train_batch(0, k, 16)}
    assert not held & seen
    # Both datasets, weighted 2:1; each problem names its source (per-source metrics).
    sources = [p.data_source for k in range(20) for p in task.train_batch(0, k, 16)]
    assert 0.55 < sources.count("chain_sum") / len(sources) < 0.8


def test_prompts_fit_the_budget_and_demonstrations_use_the_tag():
    task = _task()
    budget = task.prompt_budget(len)
    rng = np.random.default_rng(0)
    for p in task.train_batch(0, 0, 64):
        assert len(task.prompt(p)) <= budget and "<answer></answer>" in task.prompt(p)
        right = task.demonstration(p, False, rng, 10)
        wrong = task.demonstration(p, True, rng, 10)
        assert answer_in_tag(right) == p.answer and answer_in_tag(wrong) != p.answer
    assert answer_in_tag("x <answer>1</answer> then <answer> 22 </answer>") == "22"
    assert answer_in_tag("<answer>unclosed") is None


def test_verify_jobs_carry_the_generator_not_the_entry():
    task = _task()
    p = task.train_batch(0, 0, 1)[0]
    job, = task.verify_jobs([p], ["<answer>3</answer>"])
    assert set(job) == {"dataset", "config", "seed", "index", "completion"}
    assert "answer" not in job  # the oracle is regenerated inside the sandbox


@pytest.mark.parametrize("dataset,key", [
    (GymDatasetConfig("no_such_dataset"), "task.datasets[0].name"),
    (GymDatasetConfig("chain_sum", 1.0, {"min_terms": 5, "max_terms": 2}),
     "task.datasets[0].config"),
    (GymDatasetConfig("chain_sum", 1.0, {"no_such_field": 1}), "task.datasets[0].config"),
])
def test_a_bad_dataset_entry_is_one_error_naming_its_key(dataset, key):
    with pytest.raises(ConfigError, match=re.escape(f"'{key}'")):
        tasks.build(ReasoningGymTaskConfig(datasets=[dataset]), tokenizer=None)


def test_a_prompt_budget_too_small_for_the_datasets_is_one_error():
    with pytest.raises(ConfigError, match=re.escape("'task.max_prompt_tokens'")):
        tasks.build(ReasoningGymTaskConfig(datasets=MIX, max_prompt_tokens=20), tokenizer=None)
