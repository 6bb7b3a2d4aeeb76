"""GiGPO's step-level groups (rlvr_jax/step_groups.py) against a hand-worked group of four
two-turn episodes, and through with_advantages (episode advantage + weight x step advantage
on the policy's tokens)."""

import numpy as np
import pytest

from rlvr_jax import stages, step_groups
from rlvr_jax.types import Groups

# One group (P = 1) of G = 4 episodes, R = 6 slots: turn 0 (2 tokens), an observation
# (1 token, loss mask 0), turn 1 (2 tokens), pad. Episodes 0, 1 and 2 start turn 1 from the
# same history [3, 4, 9]; episode 3 took another first turn [3, 5, 9]. Per-turn reward 0.5 on
# episode 0's first turn; outcomes 1, 0, 1, 0.
TOKENS = np.array([[[3, 4, 9, 6, 7, 0], [3, 4, 9, 6, 8, 0], [3, 4, 9, 5, 5, 0],
                    [3, 5, 9, 6, 7, 0]]], np.int32)
LOSS = np.array([[[1, 1, 0, 1, 1, 0]] * 4], np.float32)
OUTCOME = np.array([[1.0, 0.0, 1.0, 0.0]], np.float32)
TURNS = np.zeros((1, 4, 6), np.float32)
TURNS[0, 0, 1] = 0.5


def test_turn_spans_are_the_runs_of_policy_tokens():
    assert step_groups.turn_spans(LOSS[0, 0]) == [(0, 2), (3, 5)]
    assert step_groups.turn_spans(np.zeros(4)) == []
    assert step_groups.turn_spans(np.ones(3)) == [(0, 3)]


def test_step_advantages_by_hand():
    """gamma 0.5. Turn 0 (the prompt, all four): returns 0.5 + 0.5 * 1 = 1.0, 0.5 * 0 = 0,
    0.5, 0 -> mean 0.375, std (ddof 1) 0.4787. Turn 1 from [3, 4, 9]: episodes 0, 1, 2 with
    returns 1, 0, 1 -> mean 2/3, std 0.5774; episode 3's turn 1 is alone (no group, 0)."""
    adv, metrics = step_groups.step_advantages(TOKENS, LOSS, OUTCOME, TURNS, gamma=0.5,
                                               eps=0.0)
    r0 = np.array([1.0, 0.0, 0.5, 0.0])
    a0 = (r0 - r0.mean()) / r0.std(ddof=1)
    r1 = np.array([1.0, 0.0, 1.0])
    a1 = (r1 - r1.mean()) / r1.std(ddof=1)
    for g in range(4):
        np.testing.assert_allclose(adv[0, g, :2], a0[g], rtol=1e-6)
        assert adv[0, g, 2] == 0 and adv[0, g, 5] == 0  # observation, pad
    np.testing.assert_allclose(adv[0, :3, 3:5], np.repeat(a1[:, None], 2, 1), rtol=1e-6)
    assert np.all(adv[0, 3, 3:5] == 0)
    assert metrics["gigpo/later_turns_grouped"] == pytest.approx(3 / 4)
    assert metrics["gigpo/later_turns"] == 4
    # A sample out of the loss (all-zero loss mask) joins no group: turn 1 of 0, 2 only.
    loss = LOSS.copy()
    loss[0, 1] = 0
    adv2, _ = step_groups.step_advantages(TOKENS, loss, OUTCOME, TURNS, gamma=0.5, eps=0.0)
    assert np.all(adv2[0, 1] == 0) and np.all(adv2[0, [0, 2], 3:5] == 0)  # returns 1, 1: equal


def test_with_advantages_adds_the_weighted_step_advantage_on_policy_tokens():
    z = lambda *s, dt=np.float32: np.zeros((1, 4, *s), dt)
    groups = Groups(z(2, dt=np.int32), np.ones((1, 4, 2), np.int32), TOKENS, z(6),
                    (TOKENS > 0).astype(np.float32), LOSS, OUTCOME, TURNS)
    plain, _ = stages.with_advantages(groups, 1, None, None, 0.0, put=lambda b: b,
                                      ppo_prepare=None, estimator="grpo", eps=1e-6)
    mixed, metrics = stages.with_advantages(groups, 1, None, None, 0.0, put=lambda b: b,
                                            ppo_prepare=None, estimator="grpo", eps=1e-6,
                                            step_weight=0.5, step_gamma=0.5)
    step, _ = step_groups.step_advantages(TOKENS, LOSS, OUTCOME, TURNS, gamma=0.5)
    np.testing.assert_allclose(mixed.advantages_B_R,
                               plain.advantages_B_R + 0.5 * step.reshape(4, 6), rtol=1e-6)
    assert metrics["gigpo/later_turns_grouped"] == pytest.approx(3 / 4)
