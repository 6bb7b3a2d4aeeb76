"""The jitted update steps: microbatches equal the full batch, epochs x minibatches equal
sequential updates, critic warm-up, PPO's prepare step against a float64 pipeline."""

import jax
import numpy as np
import optax
import pytest

from rlvr_jax import losses, objectives, optim, ppo_prepare, sharding, train_step
from rlvr_jax.config import ModelConfig
from rlvr_jax.models import value as value_model
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.types import TrainBatch
from tests.helpers import rl_step_options


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


@pytest.mark.parametrize("critic", [pytest.param("separate", marks=pytest.mark.slow), "head"])
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
    prepare = ppo_prepare.make_ppo_prepare(model, prompt_len=p, temperature=1.0,
                                          critic_layout=critic,
                                          gamma=0.9, lam=0.8, whiten_advantages=True,
                                          kl_in_reward=True, kl_estimator="k1")
    # Per-turn rewards at turn-end tokens (multi-turn); one outside the loss mask is dropped.
    turn = np.zeros((b, n), np.float32)
    turn[0, 1], turn[3, 0], turn[1, 3] = -0.3, 0.5, 7.0
    out, metrics = prepare(params, ref, batch, outcome, turn, np.float32(0.2))

    hidden = None
    if critic == "head":
        hidden = model.apply({"params": policy}, tokens, input_mask,
                             method="forward")[:, p - 1: -1]
    v = np.asarray(value_model.response_values(model, critic_params, tokens, input_mask, p,
                                               hidden), np.float64) * resp
    ref_logp, _ = train_step.response_logp(model, ref, tokens, input_mask, p, 1.0)
    kl = (old_logp - np.asarray(ref_logp, np.float64)) * resp  # k1
    r = np.zeros((b, n))
    for i in range(b):
        k = int(resp[i].sum())
        if k:
            r[i, k - 1] = outcome[i]
    r = (r + turn - 0.2 * kl) * resp
    adv, ret = _gae_numpy(r, v, resp, 0.9, 0.8)
    valid = adv[resp > 0]
    adv = (adv - valid.mean()) / np.sqrt(valid.var() + 1e-8) * resp
    np.testing.assert_allclose(np.asarray(out.old_values_B_R), v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out.returns_B_R), ret, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out.advantages_B_R), adv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(metrics["kl_ref_per_seq"]), kl.sum() / 5, rtol=1e-5)


CFG = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)


MODEL = Decoder(CFG, 20)


P, N, B = 4, 5, 16


def _batch(seed=0):
    """Uneven response lengths (1..5 tokens) and one empty sequence: the counts differ per
    microbatch, which is where a naive per-microbatch mean goes wrong."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(2, 20, size=(B, P + N)).astype(np.int32)
    lengths = rng.integers(1, N + 1, size=B)
    lengths[3] = 0
    resp = (np.arange(N)[None] < lengths[:, None]).astype(np.float32)
    input_mask = np.concatenate([np.ones((B, P), np.int32), resp.astype(np.int32)], axis=1)
    input_mask[:4, :1] = 0
    adv = rng.normal(size=(B, 1)).astype(np.float32) * resp
    return TrainBatch(tokens, input_mask, resp, -rng.uniform(0.5, 3.0, (B, N)).astype(np.float32),
                      adv, rng.normal(size=(B, N)).astype(np.float32) * resp,
                      rng.normal(scale=0.1, size=(B, N)).astype(np.float32) * resp)


def _state(tx, critic=None):
    params = init_params(MODEL, jax.random.key(0))
    rl = {"policy": params}
    if critic:
        rl["value"] = value_model.init_critic(CFG, critic, params, jax.random.key(1))
        rl["value"]["head"] = jax.tree.map(lambda x: x + 0.05, rl["value"]["head"])
    return optim.init_train_state(rl, tx), params


def _step(tx, **kw):
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    abstract = jax.eval_shape(lambda: _state(tx, kw.get("critic"))[0])
    return train_step.make_rl_step(
        MODEL, tx, optax.constant_schedule(0.1), prompt_len=P, temperature=1.0,
        state_sharding=sharding.state_shardings(abstract, mesh),
        metrics_sharding=sharding.replicated(mesh),
        **rl_step_options(eps_low=0.2, eps_high=0.28, norm_tokens=N, **kw))


def _close(a, b, rtol=2e-5, atol=1e-7):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol,
                                                         atol=atol), a, b)


@pytest.mark.parametrize("agg", losses.AGGREGATIONS)
def test_microbatch_losses_sum_to_the_full_batch_loss(agg):
    """For every aggregation, microbatch losses with the full batch's counts sum to the full
    loss (so their gradients do too), however unevenly the valid tokens fall."""
    b = _batch()
    rng = np.random.default_rng(1)
    logp = b.old_logp_B_R + rng.normal(scale=0.2, size=b.old_logp_B_R.shape).astype(np.float32)
    args = lambda rows: (logp[rows], b.old_logp_B_R[rows], logp[rows] - 0.1,
                         b.advantages_B_R[rows], b.response_mask_B_R[rows],
                         np.zeros_like(logp[rows]))
    opts = dict(eps_low=0.2, eps_high=0.28, kl_coef=0.1, loss_agg=agg, norm_tokens=N,
                entropy_coef=0.01)
    full, m_full = losses.policy_gradient_loss(*args(slice(None)), **opts)
    total = losses.counts(b.response_mask_B_R)
    parts = [losses.policy_gradient_loss(*args(slice(i, i + 4)), total=total, **opts) for i in range(0, B, 4)]
    np.testing.assert_allclose(sum(float(l) for l, _ in parts), float(full), rtol=1e-5)
    for k in ("pg_loss", "entropy", "ratio_mean", "clip_frac_low", "approx_kl_old", "kl_ref"):
        np.testing.assert_allclose(sum(float(m[k]) for _, m in parts), float(m_full[k]),
                                   rtol=1e-5, atol=1e-7, err_msg=k)


def test_microbatched_update_equals_full_batch():
    """The jitted step: policy loss, KL term and a value head on the shared trunk, accumulated
    over 4 microbatches, give the full-batch update and metrics."""
    extra = {"critic": "head", "kl_coef": 0.1}
    agg = "seq-mean-token-mean"
    tx = optax.sgd(0.1)  # the update is the gradient itself
    full_state, ref = _state(tx, extra.get("critic"))
    micro_state, _ = _state(tx, extra.get("critic"))
    batch = _batch()
    full, m_full = _step(tx, loss_agg=agg, **extra)(full_state, ref, batch, jax.random.key(0), 1.0)
    micro, m_micro = _step(tx, loss_agg=agg, microbatches=4, **extra)(micro_state, ref, batch,
                                                                      jax.random.key(0), 1.0)
    _close(micro.params, full.params)
    for k in ("loss", "pg_loss", "entropy", "ratio_mean", "clip_frac_low", "approx_kl_old",
              "ratio_max", "grad_norm", "value_loss", "kl_ref"):
        np.testing.assert_allclose(float(m_micro[k]), float(m_full[k]), rtol=2e-5, err_msg=k)


def test_epochs_over_minibatches_equal_sequential_updates():
    """epochs=2 x minibatches=2 == four single updates on the same row subsets, in order, all
    against the sampler's old log-probs."""
    tx = optax.adam(1e-2)
    batch, key = _batch(), jax.random.key(5)
    state, ref = _state(tx)
    fused, m = _step(tx, epochs=2, minibatches=2)(state, ref, batch, key, 1.0)
    single = _step(tx)
    state, _ = _state(tx)
    for e in range(2):
        perm = np.asarray(jax.random.permutation(jax.random.fold_in(key, e), B))
        for rows in perm.reshape(2, B // 2):
            state, m_last = single(state, ref, jax.tree.map(lambda x: x[rows], batch), key, 1.0)
    # Adam's m / sqrt(v) turns a last-bit difference in a near-zero gradient into a visible
    # one in that weight (seen: 3e-6 in 1 of 4096 under other compiler settings); wrong
    # rows or order move weights by ~lr = 1e-2.
    _close(fused.params, state.params, rtol=1e-4, atol=1e-5)
    assert int(fused.step) == 4
    # Later updates see a moved policy against fixed old log-probs.
    assert float(m_last["approx_kl_old"]) != float(m["approx_kl_old"])
    # The sampler/trainer gap is the first update's: the params the sampler had.
    state, _ = _state(tx)
    mb = jax.tree.map(lambda x: x[np.asarray(jax.random.permutation(jax.random.fold_in(
        key, 0), B)).reshape(2, B // 2)[0]], batch)
    _, m_first = single(state, ref, mb, key, 1.0)
    for k in ("sampler_gap_mean", "sampler_gap_max"):
        np.testing.assert_allclose(float(m[k]), float(m_first[k]), rtol=1e-5)


def test_critic_warmup_updates_only_the_value_net():
    tx = optax.adam(1e-2)
    state, ref = _state(tx, "separate")
    before = jax.tree.map(np.asarray, state.params)
    after, m = _step(tx, critic="separate")(state, ref, _batch(), jax.random.key(0), 0.0)
    _close(after.params["policy"], before["policy"], rtol=0, atol=0)
    moved = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - b).max()),
                         after.params["value"], before["value"])
    assert max(jax.tree.leaves(moved)) > 0
    assert float(m["value_loss"]) > 0


@pytest.mark.parametrize("options", [dict(remat="dots", logits_chunk_tokens=2), pytest.param(
    dict(remat="full", logits_chunk_tokens=3), marks=pytest.mark.slow)])
def test_remat_and_chunked_logits_give_the_same_update(options):
    """Rematerialised blocks and the head in token chunks change what is stored for the
    backward pass, not the update: one PPO-style step (KL term, value head on the trunk) equals
    the plain one, params and metrics."""
    import dataclasses

    tx = optax.sgd(0.1)
    batch = _batch()
    mesh = sharding.make_mesh(devices=jax.devices()[:1])

    def step_with(cfg):
        model = Decoder(cfg, MODEL.vocab_size)
        state, ref = _state(tx, "head")
        abstract = jax.eval_shape(lambda: _state(tx, "head")[0])
        step = train_step.make_rl_step(
            model, tx, optax.constant_schedule(0.1), prompt_len=P, temperature=1.0,
            state_sharding=sharding.state_shardings(abstract, mesh),
            metrics_sharding=sharding.replicated(mesh),
            **rl_step_options(eps_low=0.2, eps_high=0.28, norm_tokens=N, kl_coef=0.1,
                              entropy_coef=0.01, critic="head"))
        return step(state, ref, batch, jax.random.key(0), 1.0)

    base, m_base = step_with(CFG)
    other, m_other = step_with(dataclasses.replace(CFG, **options))
    _close(other.params, base.params, rtol=1e-5, atol=1e-6)
    for k in ("loss", "pg_loss", "entropy", "kl_ref", "value_loss", "grad_norm"):
        np.testing.assert_allclose(float(m_other[k]), float(m_base[k]), rtol=1e-5, err_msg=k)


def test_a_reference_held_in_the_compute_dtype_gives_the_same_log_probs_bitwise():
    """build.reference_params keeps the frozen reference in bfloat16 when the model
    computes in bfloat16: every parameter is cast to it at use, so nothing changes."""
    from rlvr_jax.build import reference_params

    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=64, qkv_bias=True, tie_embeddings=True,
                      param_dtype="float32", compute_dtype="bfloat16")
    model = Decoder(cfg, 24)
    params = init_params(model, jax.random.key(0))
    ref = reference_params(params, cfg.compute_dtype)
    assert all(x.dtype == jax.numpy.bfloat16 for x in jax.tree.leaves(ref))
    tokens = jax.random.randint(jax.random.key(1), (3, 9), 2, 24)
    mask = np.ones((3, 9), np.int32)
    mask[1, :2] = 0
    want = train_step.response_logp(model, params, tokens, mask, 4, 1.0)
    got = train_step.response_logp(model, ref, tokens, mask, 4, 1.0)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.asarray(w), np.asarray(g))


@pytest.mark.parametrize("agg", [a if a == "token-mean" else pytest.param(a, marks=pytest.mark.slow)
                                 for a in losses.AGGREGATIONS])
def test_observation_tokens_contribute_exactly_nothing_to_the_update(agg):
    """A multi-turn batch: observation tokens are attended to (input mask 1) but are not the
    policy's (loss mask 0). Changing their recorded log-probs and advantages changes neither
    the update nor a metric, for every aggregation, with the KL and entropy terms on (their
    denominators count policy tokens only)."""
    base = _batch(3)
    rng = np.random.default_rng(4)
    obs = (rng.random(base.response_mask_B_R.shape) < 0.4) & (base.response_mask_B_R == 1)
    loss_mask = base.response_mask_B_R * ~obs
    batch = base._replace(response_mask_B_R=loss_mask, advantages_B_R=base.advantages_B_R * loss_mask)
    noisy = batch._replace(
        old_logp_B_R=np.where(obs, -50.0 * rng.random(obs.shape), batch.old_logp_B_R).astype(np.float32),
        advantages_B_R=np.where(obs, 1e3 * rng.normal(size=obs.shape), batch.advantages_B_R).astype(np.float32))
    tx = optax.sgd(0.1)
    step = _step(tx, loss_agg=agg, kl_coef=0.1, entropy_coef=0.01)
    a, m_a = step(_state(tx)[0], _state(tx)[1], batch, jax.random.key(0), 1.0)
    b, m_b = step(_state(tx)[0], _state(tx)[1], noisy, jax.random.key(0), 1.0)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)),
                 a.params, b.params)
    for k in m_a:
        np.testing.assert_array_equal(np.asarray(m_a[k]), np.asarray(m_b[k]), err_msg=k)


def test_the_off_policy_correction_in_the_update():
    """correction=token: with the sampler's log-probs equal to the trainer's, every weight is
    1 and the update is the uncorrected one; with the sampler 3x less likely on every token,
    every weight is capped at 2 and the first update moves twice as far. With several updates
    (epochs 2 x minibatches 2) the proximal log-probs are the step's starting params'."""
    tx = optax.sgd(0.1)
    batch = _batch()
    state, ref = _state(tx)
    trainer, _ = train_step.response_logp(MODEL, state.params["policy"], batch.tokens_B_T,
                                          batch.input_mask_B_T, P, 1.0)
    exact = batch._replace(old_logp_B_R=np.asarray(trainer) * batch.response_mask_B_R)
    key = jax.random.key(3)
    plain, m0 = _step(tx)(_state(tx)[0], ref, exact, key, 1.0)
    fixed, m1 = _step(tx, correction="token", is_cap=2.0)(_state(tx)[0], ref, exact, key, 1.0)
    _close(plain.params, fixed.params, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(m1["is_weight_mean"]), 1.0, rtol=1e-5)
    assert float(m1["is_capped_frac"]) == 0.0
    far = exact._replace(old_logp_B_R=(exact.old_logp_B_R - np.log(3.0))
                         * batch.response_mask_B_R)
    capped, m2 = _step(tx, correction="token", is_cap=2.0)(_state(tx)[0], ref, far, key, 1.0)
    np.testing.assert_allclose(float(m2["is_capped_frac"]), 1.0)
    np.testing.assert_allclose(float(m2["is_weight_mean"]), 2.0, rtol=1e-5)
    start = _state(tx)[0].params
    moved = lambda s: jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), s.params, start)
    # (deltas of float32 params: one ulp of the params is ~1e-7)
    _close(moved(capped), jax.tree.map(lambda d: 2 * d, moved(plain)), rtol=1e-4, atol=5e-7)
    # Several updates: the weights are against the starting params (computed before them).
    multi, m3 = _step(tx, correction="token", is_cap=2.0, epochs=2, minibatches=2)(
        _state(tx)[0], ref, exact, key, 1.0)
    np.testing.assert_allclose(float(m3["is_weight_max"]), 1.0, rtol=1e-5)
    # Masked (IcePop's token mask): the 3x-off sampler puts every token outside [0.5, 2],
    # so every token is masked and nothing moves; matched log-probs keep them all.
    masked, m4 = _step(tx, correction="token_mask")(_state(tx)[0], ref, far, key, 1.0)
    assert float(m4["is_masked_frac"]) == 1.0
    _close(masked.params, _state(tx)[0].params, rtol=0, atol=0)
    kept, m5 = _step(tx, correction="geo_mask")(_state(tx)[0], ref, exact, key, 1.0)
    assert float(m5["is_masked_frac"]) == 0.0
    _close(kept.params, plain.params, rtol=1e-5, atol=1e-7)


G = 4  # the grouped batch: P * G = B rows, B / G = 4 groups


def _grouped_batch(seed=0):
    """`_batch` with each group of G rows given its first row's prompt (the loop's P_G
    order), two groups left-padded differently."""
    b = _batch(seed)
    mask = b.input_mask_B_T.copy()
    mask[8:12, :2] = 0
    tokens, mask = b.tokens_B_T.copy(), mask
    tokens[:, :P] = np.repeat(tokens[::G, :P], G, 0)
    mask[:, :P] = np.repeat(mask[::G, :P], G, 0)
    return b._replace(tokens_B_T=tokens, input_mask_B_T=mask)


@pytest.mark.parametrize("options", [
    dict(kl_coef=0.1, entropy_coef=0.01, critic="head", microbatches=2),
    pytest.param(dict(critic="separate", correction="token", is_cap=2.0,
                      loss_agg="seq-mean-token-mean"), marks=pytest.mark.slow),
])
def test_each_groups_prompt_once_gives_the_same_update(options):
    """group_size=G (each group's prompt computed once in the policy, reference and critic
    forwards) against the per-row forward: the same update and metrics to float32 rounding,
    with microbatches cut on group boundaries."""
    tx = optax.sgd(0.1)
    batch = _grouped_batch()
    critic = options.get("critic")
    rows, m_rows = _step(tx, prompt_rows=G, **options)(*_state(tx, critic), batch,
                                                       jax.random.key(0), 1.0)
    once, m_once = _step(tx, group_size=G, **options)(*_state(tx, critic), batch,
                                                      jax.random.key(0), 1.0)
    _close(once.params, rows.params, rtol=1e-4, atol=1e-6)
    # A fraction of tokens past a threshold (clip fractions) may differ by one token whose
    # value sits on the threshold: the two forwards round differently in float32 (seen on
    # one CPU, not on another: value_clip_frac 0.239 vs 0.217, 1 of 46 tokens).
    one_token = 1.0 / float(batch.response_mask_B_R.sum())
    for k in set(m_rows) - {"update_positions_per_token"}:  # the work differs, as it should
        np.testing.assert_allclose(float(m_once[k]), float(m_rows[k]), rtol=1e-4,
                                   atol=one_token + 1e-6 if k.endswith("_frac") else 1e-6,
                                   err_msg=k)
    assert float(m_once["update_positions_per_token"]) < float(
        m_rows["update_positions_per_token"])


def test_minibatches_of_whole_groups_equal_sequential_updates():
    """group_size=G, epochs=2 x minibatches=2 (x 2 microbatches, with the decoupled
    correction): each update's rows are whole groups (train_step.update_rows), and the step
    equals four single per-row updates on those rows in order."""
    tx = optax.sgd(0.1)
    batch, key = _grouped_batch(), jax.random.key(5)
    idx = np.asarray(train_step.update_rows(key, B, 2, 2, G))
    assert idx.shape == (4, B // 2)
    groups = idx.reshape(4, -1, G)
    assert (groups == groups[..., :1] + np.arange(G)).all() and (groups[..., 0] % G == 0).all()
    for e in range(2):
        assert sorted(idx[2 * e: 2 * e + 2].ravel().tolist()) == list(range(B))
    opts = dict(correction="token", is_cap=2.0)
    state, ref = _state(tx)
    fused, m = _step(tx, epochs=2, minibatches=2, microbatches=2, group_size=G, **opts)(
        state, ref, batch, key, 1.0)
    state, _ = _state(tx)
    trainer, _ = train_step.response_logp(MODEL, state.params["policy"], batch.tokens_B_T,
                                          batch.input_mask_B_T, P, 1.0)
    prox = batch._replace(prox_logp_B_R=np.asarray(trainer))  # the step's starting params'
    single = _step(tx, **opts)
    for rows in idx:
        state, _ = single(state, ref, jax.tree.map(lambda x: x[rows], prox), key, 1.0)
    _close(fused.params, state.params, rtol=1e-4, atol=1e-6)
    assert int(fused.step) == 4


@pytest.mark.parametrize("group_size, options", [
    (G, dict(kl_coef=0.1, entropy_coef=0.01, critic="head")),
    pytest.param(1, dict(critic="separate", loss_agg="seq-mean-token-sum-norm",
                         policy_loss="gspo"), marks=pytest.mark.slow),
    pytest.param(G, dict(correction="token", is_cap=2.0, epochs=2, minibatches=2,
                         policy_loss="cispo"), marks=pytest.mark.slow),
])
def test_the_packed_update_equals_the_padded_one(group_size, options):
    """Issue 40: the update packed (packing.py: each unit's prompt once, microbatches of 2
    packed rows, the empty ones skipped) equals the padded one to float32 rounding: params
    after an SGD step and every metric, with a hole inside a response, an empty row, prompts
    padded differently, the policy, reference and critic forwards and the decoupled
    correction. Its positions per real token fall below the padded update's."""
    tx = optax.sgd(0.1)
    batch = _grouped_batch()
    mask, resp = batch.input_mask_B_T.copy(), batch.response_mask_B_R.copy()
    mask[5, P + 1], resp[5, 1] = 0, 0  # a masked slot between two turns
    batch = batch._replace(input_mask_B_T=mask, response_mask_B_R=resp)
    critic = options.get("critic")
    padded, m_pad = _step(tx, group_size=group_size, prompt_rows=G, **options)(
        *_state(tx, critic), batch, jax.random.key(0), 1.0)
    packed, m_pack = _step(tx, group_size=group_size, pack_rows=2, pack_capacity=P + N + 3,
                           prompt_rows=G, **options)(*_state(tx, critic), batch, jax.random.key(0), 1.0)
    _close(packed.params, padded.params, rtol=1e-4, atol=1e-6)
    one_token = 1.0 / float(batch.response_mask_B_R.sum())
    for k in m_pad:
        if k != "update_positions_per_token":
            np.testing.assert_allclose(float(m_pack[k]), float(m_pad[k]), rtol=1e-4,
                                       atol=one_token + 1e-6 if k.endswith("_frac") else 1e-6,
                                       err_msg=k)
    assert 1.0 <= float(m_pack["update_positions_per_token"]) < float(
        m_pad["update_positions_per_token"])


@pytest.mark.parametrize("critic", ["separate", pytest.param("head", marks=pytest.mark.slow)])
def test_ppo_prepare_with_each_groups_prompt_once_and_packed(critic):
    """PPO's prepare (critic values, the reference's KL in the reward, GAE, whitening) with
    group_size=G, and packed as the update is (rows of P + N + 3 slots, microbatches of 2
    rows; per row and per group), equals the per-row one to float32 rounding."""
    batch = _grouped_batch()
    state, ref = _state(optax.sgd(0.1), critic)
    outcome = np.random.default_rng(2).normal(size=B).astype(np.float32)
    turn = np.zeros((B, N), np.float32)
    out = {}
    for g, pack in ((1, 0), (G, 0), (1, 2), (G, 2)):
        prepare = ppo_prepare.make_ppo_prepare(
            MODEL, prompt_len=P, temperature=1.0, critic_layout=critic, gamma=0.9, lam=0.8,
            whiten_advantages=True, kl_in_reward=True, group_size=g, pack_rows=pack,
            pack_capacity=P + N + 3 if pack else 0)
        out[g, pack] = prepare(state.params, ref, batch, outcome, turn, np.float32(0.2))
    b1, m1 = out[1, 0]
    for key in ((G, 0), (1, 2), (G, 2)):
        bg, mg = out[key]
        for name in ("advantages_B_R", "returns_B_R", "old_values_B_R"):
            np.testing.assert_allclose(np.asarray(getattr(bg, name)),
                                       np.asarray(getattr(b1, name)), rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} {key}")
        np.testing.assert_allclose(float(mg["kl_ref_per_seq"]), float(m1["kl_ref_per_seq"]),
                                   rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # a compile per objective (~6 s each)
@pytest.mark.parametrize("objective", sorted(objectives.specs()))
def test_every_objective_updates_with_one_compile(objective):
    """Issue 39: each objective of the table trains through the real update (two steps on
    two batches), compiled once, its parameters moved and finite."""
    tx = optax.sgd(0.1)
    traces = []
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    abstract = jax.eval_shape(lambda: _state(tx)[0])
    step = train_step.make_rl_step(
        MODEL, tx, optax.constant_schedule(0.1), prompt_len=P, temperature=1.0,
        state_sharding=sharding.state_shardings(abstract, mesh),
        metrics_sharding=sharding.replicated(mesh), on_trace=lambda: traces.append(1),
        **rl_step_options(eps_low=0.2, eps_high=0.28, norm_tokens=N, policy_loss=objective))
    state, ref = _state(tx)
    state = jax.device_put(state, sharding.state_shardings(abstract, mesh))  # as the loop's
    start = jax.tree.map(np.asarray, state.params)
    for seed in (0, 1):
        state, metrics = step(state, ref, _batch(seed), jax.random.key(seed), 1.0)
    assert len(traces) == 1 and np.isfinite(float(metrics["loss"]))
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - b).max()),
                                         state.params, start))
    assert max(moved) > 0 and all(np.isfinite(moved))


def _distill_step(tx, mode, coef):
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    abstract = jax.eval_shape(lambda: _state(tx)[0])
    return train_step.make_rl_step(
        MODEL, tx, optax.constant_schedule(0.1), prompt_len=P, temperature=1.0,
        state_sharding=sharding.state_shardings(abstract, mesh),
        metrics_sharding=sharding.replicated(mesh),
        distill=train_step.Distill(TEACHER, mode, coef),
        **rl_step_options(eps_low=0.2, eps_high=0.28, norm_tokens=N))


TEACHER = Decoder(ModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32),
                  20)


def test_distillation_as_a_dense_reward_is_the_advantage_minus_the_reverse_kl():
    """distill.mode=reward with a teacher of another size: the update equals the plain one
    with each token's advantage lowered by coef x (log pi_sampler - log pi_teacher); the
    logged reverse KL is that difference's token mean (float64 numpy)."""
    tx = optax.sgd(0.1)
    teacher = init_params(TEACHER, jax.random.key(5))
    batch = _batch(3)
    t_logp, _ = train_step.response_logp(TEACHER, teacher, batch.tokens_B_T,
                                         batch.input_mask_B_T, P, 1.0)
    kl = (np.asarray(batch.old_logp_B_R, np.float64) - np.asarray(t_logp, np.float64))
    m = np.asarray(batch.response_mask_B_R, np.float64)
    state, ref = _state(tx)
    got, metrics = _distill_step(tx, "reward", 0.7)(state, ref, batch, jax.random.key(0), 1.0,
                                                   teacher)
    shifted = batch._replace(advantages_B_R=(batch.advantages_B_R - 0.7 * kl * m)
                             .astype(np.float32))
    state, ref = _state(tx)
    want, _ = _step(tx)(state, ref, shifted, jax.random.key(0), 1.0)
    _close(got.params, want.params, rtol=1e-4, atol=1e-6)
    assert float(metrics["distill_reverse_kl"]) == pytest.approx((kl * m).sum() / m.sum(),
                                                                 rel=1e-5)


def test_distillation_as_a_loss_adds_k2_to_the_teacher():
    """distill.mode=loss: the loss gains coef x token-mean((log pi - log pi_teacher)^2 / 2)
    at the step's params (float64 numpy), and the update differs from the plain one."""
    tx = optax.sgd(0.1)
    teacher = init_params(TEACHER, jax.random.key(5))
    batch = _batch(4)
    state, ref = _state(tx)
    logp, _ = train_step.response_logp(MODEL, ref, batch.tokens_B_T, batch.input_mask_B_T, P,
                                       1.0)
    t_logp, _ = train_step.response_logp(TEACHER, teacher, batch.tokens_B_T,
                                         batch.input_mask_B_T, P, 1.0)
    m = np.asarray(batch.response_mask_B_R, np.float64)
    k2 = (0.5 * (np.asarray(logp, np.float64) - np.asarray(t_logp, np.float64)) ** 2 * m)
    got, metrics = _distill_step(tx, "loss", 2.0)(state, ref, batch, jax.random.key(0), 1.0,
                                                 teacher)
    assert float(metrics["distill_k2"]) == pytest.approx(k2.sum() / m.sum(), rel=1e-4)
    plain_state, ref = _state(tx)
    plain, plain_metrics = _step(tx)(plain_state, ref, batch, jax.random.key(0), 1.0)
    assert float(metrics["loss"]) == pytest.approx(
        float(plain_metrics["loss"]) + 2.0 * k2.sum() / m.sum(), rel=1e-4)
    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(plain.params)))
    assert moved > 1e-6
