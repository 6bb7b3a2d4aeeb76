"""DAPO's dynamic sampling with static shapes: selection, carry, padding, exact JSON carry."""

import numpy as np
import pytest

from rlvr_jax import dynamic_sampling
from rlvr_jax.types import Groups


def _groups(rewards_P_G, tag=0):
    k, g = np.shape(rewards_P_G)
    ones = lambda *s, dt=np.float32: np.ones((k, g, *s), dt)
    return Groups(ones(3, dt=np.int32) * tag, ones(3, dt=np.int32), ones(2, dt=np.int32) * tag,
                  -ones(2), ones(2), ones(2), np.asarray(rewards_P_G, np.float32), 0 * ones(2))


def test_dynamic_selection_carry_pad_and_drop():
    fresh = _groups([[1, 1], [0, 1], [0, 0], [1, 0], [1, 0]], tag=1)  # 3 informative: 1, 3, 4
    batch, carry, stats = dynamic_sampling.select(None, fresh, keep=2, capacity=2)
    np.testing.assert_array_equal(batch.rewards_P_G, [[0, 1], [1, 0]])
    assert carry.num == 1 and stats["dynamic/carried_out"] == 1
    assert stats["dynamic/informative_fraction"] == pytest.approx(0.6)
    # Next step: the carried group comes first; only one fresh informative group -> one pad.
    fresh2 = _groups([[0, 0], [1, 1], [1, 0]], tag=2)
    batch2, carry2, stats2 = dynamic_sampling.select(carry, fresh2, keep=3, capacity=2)
    assert batch2.num == 3 and carry2 is None
    np.testing.assert_array_equal(batch2.tokens_P_G_R[:, 0, 0], [1, 2, 2])  # carry, fresh, pad
    np.testing.assert_array_equal(batch2.loss_mask_P_G_R.sum(axis=(1, 2)), [4, 4, 0])
    assert stats2["dynamic/batch_fill"] == pytest.approx(2 / 3)
    # A carry larger than the batch: the surplus old groups are dropped, never two steps stale.
    big = _groups([[0, 1]] * 3, tag=3)
    _, carry3, stats3 = dynamic_sampling.select(big, _groups([[0, 1]], tag=4), keep=2, capacity=2)
    assert stats3["dynamic/dropped_stale"] == 1 and carry3.num == 1
    assert carry3.tokens_P_G_R[0, 0, 0] == 4


def test_carry_json_round_trip_is_exact():
    rng = np.random.default_rng(0)
    g = _groups(rng.normal(size=(3, 4)))._replace(logp_P_G_R=rng.normal(size=(3, 4, 2))
                                                 .astype(np.float32))
    for g in (g, g._replace(components_P_G_C=rng.normal(size=(3, 4, 3)).astype(np.float32))):
        back = dynamic_sampling.from_json(dynamic_sampling.to_json(g))
        for a, b in zip(g, back):
            assert (a is None and b is None) or a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    assert dynamic_sampling.from_json(dynamic_sampling.to_json(None)) is None
