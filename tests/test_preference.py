"""The Bradley-Terry and DPO losses against float64 numpy references, with their gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax import preference


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _bt_ref(rc, rr, m, eps):
    d = rc - rr - m
    return -np.mean((1 - eps) * _log_sigmoid(d) + eps * _log_sigmoid(-d))


def _dpo_ref(pc, pr, qc, qr, beta, eps):
    h = beta * ((pc - qc) - (pr - qr))
    return -np.mean((1 - eps) * _log_sigmoid(h) + eps * _log_sigmoid(-h))


@pytest.mark.parametrize("margin,eps", [(0.0, 0.0), (0.5, 0.0), (0.0, 0.1), (1.0, 0.2)])
def test_bradley_terry_loss_and_gradient_match_float64(margin, eps):
    rng = np.random.default_rng(0)
    rc, rr = rng.normal(size=16) * 3, rng.normal(size=16) * 3
    rc[3] = rr[3]  # a tie: accuracy counts it half
    loss, m = preference.bradley_terry_loss(jnp.asarray(rc, jnp.float32),
                                            jnp.asarray(rr, jnp.float32), margin, eps)
    np.testing.assert_allclose(float(loss), _bt_ref(rc, rr, margin, eps), rtol=1e-6)
    np.testing.assert_allclose(float(m["accuracy"]), (np.sum(rc > rr) + 0.5) / 16, rtol=1e-6)
    grad = jax.grad(lambda a: preference.bradley_terry_loss(a, jnp.asarray(rr, jnp.float32),
                                                            margin, eps)[0])(
        jnp.asarray(rc, jnp.float32))
    d = rc - rr - margin
    sig = lambda x: 1 / (1 + np.exp(-x))
    # d/dd of -[(1-e) log s(d) + e log s(-d)] = -(1-e)(1 - s(d)) + e (1 - s(-d))
    want = (-(1 - eps) * (1 - sig(d)) + eps * (1 - sig(-d))) / 16
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-5, atol=1e-7)


def test_bradley_terry_by_hand():
    # One pair, gap 0: loss log 2; gap ln 3 (P = 3/4): loss -log(3/4).
    loss, _ = preference.bradley_terry_loss(jnp.array([0.0]), jnp.array([0.0]))
    assert abs(float(loss) - np.log(2)) < 1e-6
    loss, _ = preference.bradley_terry_loss(jnp.array([np.log(3.0)]), jnp.array([0.0]))
    assert abs(float(loss) + np.log(0.75)) < 1e-6


@pytest.mark.parametrize("beta,eps", [(0.1, 0.0), (0.5, 0.0), (0.1, 0.1)])
def test_dpo_loss_and_gradient_match_float64(beta, eps):
    rng = np.random.default_rng(1)
    pc, pr, qc, qr = (rng.normal(size=8) * 5 - 20 for _ in range(4))
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    loss, m = preference.dpo_loss(f32(pc), f32(pr), f32(qc), f32(qr), beta, eps)
    np.testing.assert_allclose(float(loss), _dpo_ref(pc, pr, qc, qr, beta, eps), rtol=1e-5)
    h = beta * ((pc - qc) - (pr - qr))
    np.testing.assert_allclose(float(m["reward_margin"]), np.mean(h), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(m["accuracy"]), np.mean(h > 0))
    grad = jax.grad(lambda a: preference.dpo_loss(a, f32(pr), f32(qc), f32(qr), beta, eps)[0])(
        f32(pc))
    sig = lambda x: 1 / (1 + np.exp(-x))
    want = beta * (-(1 - eps) * (1 - sig(h)) + eps * (1 - sig(-h))) / 8
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-4, atol=1e-7)
    # At the reference (pi = pi_ref) the loss is log 2 for any beta, without smoothing.
    same, _ = preference.dpo_loss(f32(qc), f32(qr), f32(qc), f32(qr), beta, 0.0)
    assert abs(float(same) - np.log(2)) < 1e-6


# ---------------------------------------------------------------- reward model and DPO steps
from rlvr_jax import optim, preference_steps, sharding  # noqa: E402
from rlvr_jax.config import ModelConfig  # noqa: E402
from rlvr_jax.models import reward  # noqa: E402
from rlvr_jax.models.policy import Decoder, init_params  # noqa: E402
from rlvr_jax.types import PairBatch  # noqa: E402
import optax  # noqa: E402

CFG = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  intermediate_size=64)
VOCAB, L, R = 16, 4, 5


def _pairs(n, seed=0):
    """Left-padded prompts; responses of random lengths ending in 5 (chosen) or 6 (rejected)."""
    rng = np.random.default_rng(seed)
    sides = []
    for end in (5, 6):
        tokens = np.zeros((n, L + R), np.int32)
        mask = np.zeros((n, L + R), np.int32)
        resp = np.zeros((n, R), np.float32)
        for i in range(n):
            lp, lr = rng.integers(1, L + 1), rng.integers(1, R + 1)
            tokens[i, L - lp:L] = rng.integers(7, VOCAB, lp)
            tokens[i, L:L + lr - 1] = rng.integers(7, VOCAB, lr - 1)
            tokens[i, L + lr - 1] = end
            mask[i, L - lp:L + lr] = 1
            resp[i, :lr] = 1
        sides.append((tokens, mask, resp))
    (ct, cm, cr), (rt, rm, rr) = sides
    return PairBatch(ct, cm, cr, rt, rm, rr)


def _step(make, params, **kw):
    tx = optax.adam(3e-3)
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    state = optim.init_train_state(params, tx)
    state = jax.device_put(state, sharding.state_shardings(state, mesh))  # as the loop places it
    traces = []
    step = make(Decoder(CFG, VOCAB), tx, optax.constant_schedule(3e-3),
                state_sharding=sharding.state_shardings(state, mesh),
                metrics_sharding=sharding.replicated(mesh), on_trace=lambda: traces.append(1),
                **kw)
    return state, step, traces


def test_reward_scores_of_a_padded_batch_equal_each_row_alone():
    model = Decoder(CFG, VOCAB)
    params = reward.init_reward_model(CFG, init_params(model, jax.random.key(0)),
                                      jax.random.key(1))
    params["head"] = jax.tree.map(lambda x: x + 0.5, params["head"])  # a non-zero head
    batch = _pairs(6)
    got = jax.jit(lambda p, t, m: reward.scores(model, p, t, m))(
        params, batch.chosen_B_T, batch.chosen_mask_B_T)
    for i in range(6):
        real = batch.chosen_mask_B_T[i].astype(bool)
        one = reward.scores(model, params, batch.chosen_B_T[i][real][None],
                            np.ones((1, int(real.sum())), np.int32))
        np.testing.assert_allclose(float(got[i]), float(one[0]), rtol=1e-5, atol=1e-5)


def test_the_reward_model_step_learns_a_preference_and_compiles_once():
    model = Decoder(CFG, VOCAB)
    params = reward.init_reward_model(CFG, init_params(model, jax.random.key(0)),
                                      jax.random.key(1))
    state, step, traces = _step(preference_steps.make_reward_model_step, params)
    batch = _pairs(16)
    first = None
    for _ in range(40):
        state, m = step(state, batch)
        first = first if first is not None else float(m["loss"])
    assert first == pytest.approx(np.log(2), abs=1e-6)  # a zero head: every score 0
    assert float(m["loss"]) < 0.2 and float(m["accuracy"]) == 1.0 and len(traces) == 1
    held_out = _pairs(16, seed=1)
    rc = reward.scores(model, state.params, held_out.chosen_B_T, held_out.chosen_mask_B_T)
    rr = reward.scores(model, state.params, held_out.rejected_B_T, held_out.rejected_mask_B_T)
    assert float(jnp.mean(rc > rr)) == 1.0


def test_the_dpo_step_starts_at_log_2_and_raises_the_chosen_margin():
    model = Decoder(CFG, VOCAB)
    params = init_params(model, jax.random.key(0))
    batch = _pairs(16)
    ref = [preference_steps.sequence_logp(model, params, t, m, r, L) for t, m, r in (
        (batch.chosen_B_T, batch.chosen_mask_B_T, batch.chosen_response_mask_B_R),
        (batch.rejected_B_T, batch.rejected_mask_B_T, batch.rejected_response_mask_B_R))]
    with_ref = preference_steps.make_with_reference_logp(model, prompt_len=L)(params, batch)
    np.testing.assert_allclose(with_ref.ref_logp_chosen_B, ref[0], rtol=1e-5)
    np.testing.assert_allclose(with_ref.ref_logp_rejected_B, ref[1], rtol=1e-5)
    batch = batch._replace(ref_logp_chosen_B=ref[0], ref_logp_rejected_B=ref[1])
    state, step, traces = _step(preference_steps.make_dpo_step, {"policy": params}, prompt_len=L,
                                beta=0.5)
    state, m = step(state, batch)
    assert float(m["loss"]) == pytest.approx(np.log(2), abs=1e-5)
    for _ in range(30):
        state, m = step(state, batch)
    assert float(m["reward_margin"]) > 1.0 and float(m["accuracy"]) == 1.0 and len(traces) == 1
