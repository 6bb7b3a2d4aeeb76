"""The procedural preference source: correct over wrong, noisy labels at the set rate, gold
kept, deterministic per batch."""

import numpy as np

from rlvr_jax.tasks.arithmetic import ArithmeticTask
from rlvr_jax.tasks.preference_pairs import procedural_pairs
from rlvr_jax.verify.trusted import check_integer


def test_pairs_prefer_the_correct_answer_up_to_the_label_noise():
    task = ArithmeticTask()
    pairs = procedural_pairs(task, seed=0, batch_index=3, count=2000, label_noise=0.25,
                             max_offset=5)
    assert pairs == procedural_pairs(task, seed=0, batch_index=3, count=2000, label_noise=0.25,
                                     max_offset=5)
    flipped = np.mean([not p.gold_agrees for p in pairs])
    assert 0.22 < flipped < 0.28
    for p in pairs[:200]:
        good, bad = (p.chosen, p.rejected) if p.gold_agrees else (p.rejected, p.chosen)
        assert task.answer_of(good) is not None and task.answer_of(bad) is not None
        jobs = task.verify_jobs([p.problem, p.problem], [good, bad])
        assert [check_integer(j).status.name for j in jobs] == ["PASS", "WRONG"]
    clean = procedural_pairs(task, seed=0, batch_index=3, count=100, label_noise=0.0,
                             max_offset=5)
    assert all(p.gold_agrees for p in clean)
