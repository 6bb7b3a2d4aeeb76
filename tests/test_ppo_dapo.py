"""PPO and DAPO pieces against hand-computed values and float64 numpy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax import advantages, batching, dynamic_sampling, losses
from rlvr_jax.types import Groups


def test_token_rewards_put_the_outcome_on_the_last_token_minus_kl():
    mask = jnp.array([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    kl = jnp.full((3, 4), 0.5)
    r = advantages.token_rewards(jnp.array([1.0, -1.0, 1.0]), mask, kl, 0.1)
    np.testing.assert_allclose(np.asarray(r), [[-0.05, -0.05, 0.95, 0.0],
                                               [-1.05, 0.0, 0.0, 0.0],
                                               [0.0, 0.0, 0.0, 0.0]], rtol=1e-6)


def test_whiten_against_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, size=(4, 6))
    mask = (np.arange(6)[None] < np.array([[6], [2], [0], [4]])).astype(np.float64)
    valid = x[mask > 0]
    want = (x - valid.mean()) / np.sqrt(valid.var() + 1e-8) * mask
    got = advantages.whiten(jnp.asarray(x, jnp.float32), jnp.asarray(mask, jnp.float32))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_adaptive_kl_controller_hand_computed():
    # KL above target by 50%: error clipped to +0.2, beta *= 1 + 0.2 * 1 / 10.
    assert advantages.adaptive_kl_coef(0.1, 1.5, 1.0, 10) == pytest.approx(0.1 * 1.02)
    # 10% below target: beta *= 1 - 0.1 * 2 / 10.
    assert advantages.adaptive_kl_coef(0.1, 0.9, 1.0, 10, n_steps=2) == pytest.approx(0.098)


def test_value_loss_clipping_hand_computed():
    v = jnp.array([[1.0, 0.0]])
    old = jnp.array([[0.5, 0.0]])
    ret = jnp.array([[2.0, 0.3]])
    mask = jnp.ones((1, 2))
    # token 0: unclipped (1-2)^2 = 1; clipped V = 0.5 + 0.2 = 0.7 -> (0.7-2)^2 = 1.69 (taken)
    # token 1: (0-0.3)^2 = 0.09 both ways.  loss = 0.5 * (1.69 + 0.09) / 2
    loss, m = losses.value_loss(v, old, ret, mask, clip=0.2)
    assert float(loss) == pytest.approx(0.5 * (1.69 + 0.09) / 2, rel=1e-6)
    assert float(m["value_clip_frac"]) == pytest.approx(0.5)
    loss, _ = losses.value_loss(v, old, ret, mask, clip=0.0)
    assert float(loss) == pytest.approx(0.5 * (1.0 + 0.09) / 2, rel=1e-6)


def test_overlong_penalty_pinned():
    # L_max = 10, L_cache = 4: free up to 6 tokens, linear to -1 at 10, -1 beyond (cut off).
    got = advantages.overlong_penalty(jnp.array([3, 6, 7, 8, 10, 11]), 10, 4, factor=0.5)
    np.testing.assert_allclose(np.asarray(got), 0.5 * np.array([0, 0, -0.25, -0.5, -1, -1]))


def test_truncated_means_full_budget_without_eos():
    eos = 1
    tokens = np.array([[5, 6, 1], [5, 6, 7], [5, 1, 0], [1, 0, 0]])
    mask = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0]], np.float32)
    np.testing.assert_array_equal(batching.truncated(tokens, mask, eos), [False, True, False, False])


def _groups(rewards_P_G, tag=0):
    k, g = np.shape(rewards_P_G)
    ones = lambda *s, dt=np.float32: np.ones((k, g, *s), dt)
    return Groups(ones(3, dt=np.int32) * tag, ones(3, dt=np.int32), ones(2, dt=np.int32) * tag,
                  -ones(2), ones(2), ones(2), np.asarray(rewards_P_G, np.float32))


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
    back = dynamic_sampling.from_json(dynamic_sampling.to_json(g))
    for a, b in zip(g, back):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert dynamic_sampling.from_json(dynamic_sampling.to_json(None)) is None


def _gae_numpy(r, v, m, gamma, lam):
    """float64 reference, one sequence at a time, backwards over its valid tokens."""
    adv = np.zeros_like(r)
    for b in range(r.shape[0]):
        n = int(m[b].sum())
        last = 0.0
        for t in reversed(range(n)):
            next_v = v[b, t + 1] if t + 1 < n else 0.0
            last = r[b, t] + gamma * next_v - v[b, t] + gamma * lam * last
            adv[b, t] = last
    return adv, (adv + v) * m


@pytest.mark.parametrize("critic", ["separate", "head"])
def test_ppo_prepare_matches_a_float64_pipeline(critic):
    from rlvr_jax import train_step
    from rlvr_jax.config import ModelConfig
    from rlvr_jax.models import value as value_model
    from rlvr_jax.models.policy import Decoder, init_params
    from rlvr_jax.types import TrainBatch

    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=4, intermediate_size=64)
    model = Decoder(cfg, 20)
    policy = init_params(model, jax.random.key(0))
    ref = init_params(model, jax.random.key(9))
    critic_params = value_model.init_critic(cfg, critic, policy, jax.random.key(1))
    critic_params["head"] = jax.tree.map(lambda x: x + 0.3, critic_params["head"])
    params = {"policy": policy, "value": critic_params}
    rng = np.random.default_rng(0)
    b, p, n = 6, 3, 4
    tokens = rng.integers(2, 20, size=(b, p + n)).astype(np.int32)
    resp = (np.arange(n)[None] < np.array([[4], [2], [1], [3], [4], [0]])).astype(np.float32)
    input_mask = np.concatenate([np.ones((b, p), np.int32), resp.astype(np.int32)], axis=1)
    old_logp = -rng.uniform(0.5, 2.0, size=(b, n)).astype(np.float32)
    batch = TrainBatch(tokens, input_mask, resp, old_logp, np.zeros((b, n), np.float32))
    outcome = np.array([1, 0, 1, -1, 0, 1], np.float32)
    prepare = train_step.make_ppo_prepare(model, prompt_len=p, temperature=1.0,
                                          critic_layout=critic,
                                          gamma=0.9, lam=0.8, whiten_advantages=True,
                                          kl_in_reward=True, kl_estimator="k1")
    out, metrics = prepare(params, ref, batch, outcome, np.float32(0.2))

    hidden = None
    if critic == "head":
        hidden = model.apply({"params": policy}, tokens, input_mask, method="forward")
    v = np.asarray(value_model.response_values(model, critic_params, tokens, input_mask, p,
                                               hidden), np.float64) * resp
    ref_logp, _ = train_step.response_logp(model, ref, tokens, input_mask, p, 1.0)
    kl = (old_logp - np.asarray(ref_logp, np.float64)) * resp  # k1
    r = np.zeros((b, n))
    for i in range(b):
        k = int(resp[i].sum())
        if k:
            r[i, k - 1] = outcome[i]
    r = (r - 0.2 * kl) * resp
    adv, ret = _gae_numpy(r, v, resp, 0.9, 0.8)
    valid = adv[resp > 0]
    adv = (adv - valid.mean()) / np.sqrt(valid.var() + 1e-8) * resp
    np.testing.assert_allclose(np.asarray(out.old_values_B_R), v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out.returns_B_R), ret, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out.advantages_B_R), adv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(metrics["kl_ref_per_seq"]), kl.sum() / 5, rtol=1e-5)


def test_sandbox_errors_are_masked_not_scored():
    from rlvr_jax import rewards
    from rlvr_jax.types import Status, Verdict

    verdicts = [Verdict(Status.PASS), Verdict(Status.SANDBOX_ERROR), Verdict(Status.WRONG),
                Verdict(Status.PASS)]
    w = rewards.loss_weights(verdicts)
    np.testing.assert_array_equal(w, [1, 0, 1, 1])
    r = rewards.from_verdicts(verdicts, "signed").reshape(1, 4)
    fixed = rewards.impute_invalid(r, w.reshape(1, 4))
    np.testing.assert_allclose(fixed, [[1, 1 / 3, -1, 1]], rtol=1e-6)  # the valid mean
    # Every failure status has a reward in every table; SANDBOX_ERROR is in none.
    for table in rewards.REWARD_TABLES.values():
        assert set(table) == set(Status) - {Status.SANDBOX_ERROR}


def test_reward_schemes_pinned():
    from rlvr_jax import rewards
    from rlvr_jax.types import Status, Verdict

    vs = [Verdict(Status.PASS, fraction=1.0), Verdict(Status.WRONG, fraction=0.6),
          Verdict(Status.SYNTAX_ERROR), Verdict(Status.RUNTIME_ERROR), Verdict(Status.TIMEOUT),
          Verdict(Status.UNPARSEABLE), Verdict(Status.WRONG)]
    np.testing.assert_allclose(rewards.from_verdicts(vs, "binary"), [1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(rewards.from_verdicts(vs, "signed"), [1, -1, -1, -1, -1, -1, -1])
    np.testing.assert_allclose(rewards.from_verdicts(vs, "code_penalty"),
                               [1, -1, -5, -3, -1, -5, -1])
    np.testing.assert_allclose(rewards.from_verdicts(vs, "graded"), [1, 0.6, 0, 0, 0, 0, 0],
                               rtol=1e-6)
