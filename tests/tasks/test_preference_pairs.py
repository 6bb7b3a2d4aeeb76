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


def test_a_file_stream_visits_every_pair_once_per_epoch_in_a_seeded_order():
    from rlvr_jax.tasks.preference_pairs import LabelledPair, file_source

    train = [LabelledPair(None, f"p{i}", "a", "b", None) for i in range(10)]
    source = file_source(train, train[:2], seed=3, count=4, prompt_len=5)
    stream = [p.prompt for k in range(5) for p in source.batch(k)]  # 20 = two epochs
    assert sorted(stream[:10]) == sorted(stream[10:]) == sorted(p.prompt for p in train)
    assert stream[:10] != stream[10:]  # a fresh order each epoch
    again = file_source(train, train[:2], seed=3, count=4, prompt_len=5)
    assert [p.prompt for p in again.batch(3)] == stream[12:16]  # a pure function of (seed, k)
    other = file_source(train, train[:2], seed=4, count=4, prompt_len=5)
    assert [p.prompt for k in range(3) for p in other.batch(k)] != stream[:12]
