"""The RL step's host stages (rlvr_jax/stages.py) on small host arrays, against hand-computed
values: `score` (sandbox errors imputed and masked, truncation masking, DAPO's overlong
shaping, reward-model and combined sources, the rollout's own loss mask), `select` (identity
and dynamic sampling) and `with_advantages` (group estimators over the real groups only)."""

import numpy as np
import pytest

from rlvr_jax import rewards, stages
from rlvr_jax.types import Rollout, Status, Verdict

EOS = 2
# B = 4 sequences in P = 2 groups of G = 2, R = 4 response slots:
#   row 0  "5 EOS"        2 tokens
#   row 1  "5 5 5 5"      4 tokens, no EOS: cut at the budget (truncated)
#   row 2  "5 5 EOS"      3 tokens
#   row 3  "5 5 5 EOS"    4 tokens, ends on EOS: not truncated
TOKENS = np.array([[5, EOS, 0, 0], [5, 5, 5, 5], [5, 5, EOS, 0], [5, 5, 5, EOS]], np.int32)
MASK = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
LOGP = -np.arange(16, dtype=np.float32).reshape(4, 4) / 10
PROMPT = np.array([[0, 7], [0, 7], [8, 9], [8, 9]], np.int32)
PMASK = np.array([[0, 1], [0, 1], [1, 1], [1, 1]], np.int32)
VERDICTS = [Verdict(Status.PASS), Verdict(Status.WRONG), Verdict(Status.SANDBOX_ERROR, "oom"),
            Verdict(Status.PASS)]
OPTIONS = dict(source="verifier", eos_id=EOS, reward_scheme="binary",
               samples_per_prompt=2, max_new_tokens=4, overlong_buffer_tokens=0,
               overlong_penalty_factor=0.0, mask_truncated=False)


def _rollout(loss_mask=MASK):
    return Rollout(TOKENS, LOGP, MASK, loss_mask)


def components(source="verifier", overlong=False, episodes=False, parts=(), weights=None,
               learned_weight=0.0):
    """score's `components` and `weights` as the loop resolves them."""
    names = rewards.component_names(source=source, overlong=overlong, episodes=episodes,
                                    parts=parts)
    return dict(components=names,
                weights=rewards.component_weights(names, weights or {}, learned_weight))


def _score(rollout=None, learned_B=None, turn_rewards_B_R=None, verdicts=VERDICTS,
           learned_weight=0.0, weights=None, parts=(), **options):
    rollout = (rollout or _rollout())._replace(turn_rewards_B_R=turn_rewards_B_R)
    o = OPTIONS | options
    names = components(o["source"], o["overlong_buffer_tokens"] > 0,
                       turn_rewards_B_R is not None, parts, weights, learned_weight)
    return stages.score(verdicts, rollout, PROMPT, PMASK, learned_B, **o, **names)


def test_a_sandbox_error_is_imputed_for_the_baseline_and_leaves_the_loss():
    g = _score()
    # PASS 1, WRONG 0 | the sandbox error takes its group's valid mean (row 3: 1), PASS 1.
    np.testing.assert_array_equal(g.rewards_P_G, [[1, 0], [1, 1]])
    np.testing.assert_array_equal(g.loss_mask_P_G_R.reshape(4, 4), MASK * [[1], [1], [0], [1]])
    np.testing.assert_array_equal(g.mask_P_G_R.reshape(4, 4), MASK)  # attention keeps it
    np.testing.assert_array_equal(g.prompt_P_G_L.reshape(4, 2), PROMPT)
    np.testing.assert_array_equal(g.logp_P_G_R.reshape(4, 4), LOGP)


def test_truncated_responses_leave_the_loss_only_when_asked():
    kept = _score().loss_mask_P_G_R.reshape(4, 4)
    cut = _score(mask_truncated=True).loss_mask_P_G_R.reshape(4, 4)
    np.testing.assert_array_equal(kept[1], MASK[1])
    np.testing.assert_array_equal(cut[1], 0)  # row 1 used its budget without EOS
    np.testing.assert_array_equal(cut[3], MASK[3])  # row 3 ends on EOS in its last slot


def test_overlong_shaping_by_hand():
    """L_max 4, L_cache 2: lengths 2, 5 (cut: counted past the budget), 3, 4 -> penalties
    0, -1, -0.5, -1, added after the sandbox error's imputation."""
    g = _score(overlong_buffer_tokens=2, overlong_penalty_factor=1.0)
    np.testing.assert_allclose(g.rewards_P_G, [[1.0, -1.0], [0.5, 0.0]])


def test_a_reward_models_score_alone_masks_nothing():
    learned = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    g = _score(learned_B=learned, source="reward_model", learned_weight=1.0)
    np.testing.assert_allclose(g.rewards_P_G.reshape(-1), learned)
    # The verifier's failure says nothing about the learned reward: row 2 stays in the loss.
    np.testing.assert_array_equal(g.loss_mask_P_G_R.reshape(4, 4), MASK)


def test_the_loss_mask_starts_from_the_rollouts_own():
    """Tokens the rollout marks as not the policy's (a multi-turn observation) never enter the
    loss, though the attention mask keeps them."""
    observation = MASK.copy()
    observation[3, 1:3] = 0
    g = _score(_rollout(observation))
    np.testing.assert_array_equal(g.loss_mask_P_G_R.reshape(4, 4)[3], [1, 0, 0, 1])
    np.testing.assert_array_equal(g.mask_P_G_R.reshape(4, 4)[3], [1, 1, 1, 1])
    with pytest.raises(AssertionError, match="loss mask"):
        _score(Rollout(TOKENS, LOGP, MASK))


TURNS = np.zeros((4, 4), np.float32)
TURNS[0, 0], TURNS[1, 2], TURNS[2, 1], TURNS[3, 1] = -0.5, 0.25, 9.0, -0.25


def test_per_turn_rewards_stay_at_their_tokens_apart_from_the_outcome():
    """The outcome stays in rewards_P_G, each per-turn reward at its token; the return is
    their sum. A masked sample (row 2, sandbox error) keeps none: its imputed reward stands
    in for it in the baseline."""
    g = _score(turn_rewards_B_R=TURNS)
    np.testing.assert_array_equal(g.rewards_P_G, [[1, 0], [1, 1]])
    want = TURNS.copy()
    want[2] = 0
    np.testing.assert_array_equal(g.turn_rewards_P_G_R.reshape(4, 4), want)
    np.testing.assert_allclose(g.returns_P_G, [[0.5, 0.25], [1.0, 0.75]])


def test_group_advantages_are_of_the_returns_with_per_turn_rewards():
    """GRPO over returns [0.5, 0.25] and [1.0, 0.75]: each group +-sqrt(0.5) (sample std);
    without the per-turn rewards group 1 ([1, 1]) would have no signal."""
    g = _score(turn_rewards_B_R=TURNS)
    batch, _ = stages.with_advantages(g, 2, None, None, 0.0, put=lambda b: b,
                                      ppo_prepare=None, estimator="grpo", eps=1e-6)
    a = 0.5 ** 0.5
    np.testing.assert_allclose(batch.advantages_B_R[:, 0], [a, -a, 0.0, -a], atol=1e-5)
    np.testing.assert_allclose(batch.advantages_B_R[3], [-a, -a, -a, -a], atol=1e-5)


def _groups(rewards_P_G):
    p = len(rewards_P_G)
    base = _score()
    tile = lambda x: np.concatenate([x] * (p // 2 + 1))[:p]
    fields = {k: tile(v) for k, v in base._asdict().items()}
    return base._replace(**fields | {"rewards_P_G": np.asarray(rewards_P_G, np.float32)})


def test_select_without_dynamic_sampling_is_the_identity():
    fresh = _groups([[1, 0], [1, 1]])
    kept = stages.select(None, fresh, dynamic=False, prompts_per_step=2)
    assert kept.groups is fresh and kept.carry is None and kept.n_real == 2 and kept.stats == {}


def test_select_keeps_informative_groups_and_pads_with_zero_weight():
    fresh = _groups([[1, 1], [1, 0], [0, 0], [0, 0]])  # one informative group of four
    kept = stages.select(None, fresh, dynamic=True, prompts_per_step=2)
    assert kept.n_real == 1 and kept.groups.num == 2 and kept.carry is None
    np.testing.assert_array_equal(kept.groups.rewards_P_G[0], [1, 0])
    assert kept.groups.loss_mask_P_G_R[1].sum() == 0  # the padding group
    assert kept.stats["dynamic/informative_fraction"] == 0.25
    surplus = _groups([[1, 0], [0, 1], [1, 0], [0, 0]])  # three informative, two slots
    kept = stages.select(None, surplus, dynamic=True, prompts_per_step=2)
    assert kept.n_real == 2 and kept.carry.num == 1


def test_with_advantages_uses_the_real_groups_only():
    groups = _groups([[1, 0], [3, 3]])
    put = lambda batch: batch  # host arrays stay on the host here
    batch, row = stages.with_advantages(groups, 1, None, None, 0.0, put=put, ppo_prepare=None,
                                        estimator="grpo", eps=1e-6)
    assert row == {}
    adv_B = (batch.advantages_B_R.sum(axis=1)
             / np.maximum(batch.response_mask_B_R.sum(axis=1), 1))
    # Group 0: (r - mean) / std with the sample std (ddof 1) sqrt(0.5): +-sqrt(0.5); group 1
    # is padding: 0 (a population std would give +-1).
    np.testing.assert_allclose(adv_B, [0.5 ** 0.5, -(0.5 ** 0.5), 0.0, 0.0], atol=1e-5)
    np.testing.assert_array_equal(batch.advantages_B_R[2:], 0)
    drgrpo, _ = stages.with_advantages(groups, 2, None, None, 0.0, put=put, ppo_prepare=None,
                                       estimator="drgrpo", eps=1e-6)
    # Dr. GRPO: r - mean, no std: +-0.5, and 0 for the all-equal group.
    np.testing.assert_allclose(drgrpo.advantages_B_R[:, 0], [0.5, -0.5, 0.0, 0.0], atol=1e-6)


def test_reward_components_are_kept_and_summed_by_their_weights():
    """Components with a task part `style`: correct [1, 0 | 0*, 0], format [1, 1 | 0*, 0]
    (row 3 unparseable), style [0.5, 0.25 | 0*, 0] (* the sandbox error's, imputed from its
    group's valid row); the reward is their weighted sum (format 0.5, style 2)."""
    verdicts = [Verdict(Status.PASS, parts=(("style", 0.5),)),
                Verdict(Status.WRONG, parts=(("style", 0.25),)),
                Verdict(Status.SANDBOX_ERROR, "oom"), Verdict(Status.UNPARSEABLE)]
    g = _score(verdicts=verdicts, parts=("style",), weights={"format": 0.5, "style": 2.0})
    np.testing.assert_allclose(g.components_P_G_C.reshape(4, 3),
                               [[1, 1, 0.5], [0, 1, 0.25], [0, 0, 0], [0, 0, 0]])
    np.testing.assert_allclose(g.rewards_P_G.reshape(-1), [1 + 0.5 + 1.0, 0 + 0.5 + 0.5, 0, 0])
    plain = _score(verdicts=verdicts, parts=("style",))  # defaults: format 0, a part 0
    np.testing.assert_allclose(plain.rewards_P_G.reshape(-1), [1, 0, 0, 0])


def test_gdpo_normalises_each_component_before_the_sum():
    """GDPO over two components against float64 numpy (GRPO per component, weighted sum,
    divided by the batch std); it tells apart what GRPO on the sum cannot: (1, 0) and (0, 1)
    in a group where the sum is constant."""
    from rlvr_jax import advantages

    rng = np.random.default_rng(3)
    c = rng.integers(0, 2, (6, 4, 2)).astype(np.float64)
    c[0] = [[1, 0], [0, 1], [1, 0], [0, 1]]  # sum constant, components not
    w = (1.0, 0.5)

    def grpo(x):
        d = x - x.mean(1, keepdims=True)
        const = x.max(1, keepdims=True) == x.min(1, keepdims=True)
        return np.where(const, 0.0, d / (x.std(1, ddof=1, keepdims=True) + 1e-6))

    s = w[0] * grpo(c[..., 0]) + w[1] * grpo(c[..., 1])
    want = s / (s.std() + 1e-6)
    got = np.asarray(advantages.from_rewards(c.sum(-1), "gdpo", 1e-6,
                                             np.asarray(c, np.float32), w))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.any(got[0] != 0) and np.all(np.asarray(advantages.grpo(c.sum(-1)))[0] == 0)
    g = _score(weights={"format": 1.0})
    batch, _ = stages.with_advantages(g, 2, None, None, 0.0, put=lambda b: b,
                                      ppo_prepare=None, estimator="gdpo", eps=1e-6,
                                      weights=(1.0, 1.0))
    assert np.all(np.isfinite(batch.advantages_B_R))


def test_an_unknown_reward_weight_names_the_components():
    from rlvr_jax.config import ConfigError

    with pytest.raises(ConfigError, match=r"reward.weights.style'.*components: correct, format"):
        components(weights={"style": 1.0})
