"""Losses: the clipped / dual-clip / GSPO policy objective, KL estimators, aggregations and
their length bias, the value loss, token log-probs and entropy, against references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax import losses


def _loss_inputs():
    # ratios: seq 0 [1.0, 1.5, 0.5] (A=+1), seq 1 [0.5, 1.5, 1.0] (A=-2, last token masked).
    old = jnp.log(jnp.array([[0.4, 0.2, 0.6], [0.5, 0.3, 0.1]]))
    ratio = jnp.array([[1.0, 1.5, 0.5], [0.5, 1.5, 1.0]])
    logp = old + jnp.log(ratio)
    adv = jnp.array([1.0, -2.0])
    mask = jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    return logp, old, adv, mask


def test_policy_gradient_loss_hand_computed():
    logp, old, adv, mask = _loss_inputs()
    # Per token max(-A r, -A clip(r, 0.8, 1.28)):
    #   seq 0 (A=+1): r=1 -> -1;  r=1.5 -> max(-1.5, -1.28) = -1.28 (clip high);
    #                 r=0.5 -> max(-0.5, -0.8) = -0.5
    #   seq 1 (A=-2): r=0.5 -> max(1.0, 1.6) = 1.6 (clip low);  r=1.5 -> max(3.0, 2.56) = 3.0
    # token mean over 5 valid tokens: (-1 - 1.28 - 0.5 + 1.6 + 3.0) / 5 = 0.364
    loss, m = jax.jit(lambda *a: losses.policy_gradient_loss(*a, eps_low=0.2, eps_high=0.28, kl_coef=0.0))(
        logp, old, None, adv[:, None] * mask, mask, jnp.zeros_like(logp))
    np.testing.assert_allclose(float(loss), 0.364, rtol=1e-5)
    np.testing.assert_allclose(float(m["clip_frac_low"]), 0.2, rtol=1e-6)
    np.testing.assert_allclose(float(m["clip_frac_high"]), 0.2, rtol=1e-6)
    np.testing.assert_allclose(float(m["ratio_mean"]), (1 + 1.5 + .5 + .5 + 1.5) / 5, rtol=1e-5)
    assert "kl_ref" not in m  # beta = 0 skips the KL term entirely
    # |old - new| log-prob over the 5 valid tokens: ratios 1, 1.5, .5, .5, 1.5 -> |log r|.
    gaps = np.abs(np.log([1.0, 1.5, 0.5, 0.5, 1.5]))
    np.testing.assert_allclose(float(m["sampler_gap_mean"]), gaps.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(m["sampler_gap_max"]), gaps.max(), rtol=1e-5)

    # With beta = 0.1 and log pi_ref - log pi = log 2 on every token: k3 = 2 - ln 2 - 1.
    ref = logp + jnp.log(2.0)
    loss_kl, m = losses.policy_gradient_loss(logp, old, ref, adv[:, None] * mask, mask, jnp.zeros_like(logp),
                                  eps_low=0.2, eps_high=0.28, kl_coef=0.1)
    k3 = 2.0 - np.log(2.0) - 1.0
    np.testing.assert_allclose(float(m["kl_ref"]), k3, rtol=1e-5)
    np.testing.assert_allclose(float(loss_kl), 0.364 + 0.1 * k3, rtol=1e-5)


def test_on_policy_gradient_is_reinforce():
    """At ratio 1 the gradient w.r.t. each token's log-prob is -A / (number of valid tokens)."""
    logp, _, adv, mask = _loss_inputs()
    grad = jax.grad(lambda lp: losses.policy_gradient_loss(lp, jax.lax.stop_gradient(lp), None,
                                                adv[:, None] * mask, mask,
                                                jnp.zeros_like(lp), eps_low=0.2, eps_high=0.28,
                                                kl_coef=0.0)[0])(logp)
    want = -np.asarray(adv)[:, None] * np.asarray(mask) / 5.0
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-6)


def test_k3_is_unbiased_for_exact_kl():
    """E_{x~p}[k3(x)] = KL(p || q) exactly on a categorical distribution."""
    p = np.array([0.1, 0.2, 0.3, 0.4])
    q = np.array([0.25, 0.25, 0.4, 0.1])
    k3 = np.asarray(losses.kl_estimate(jnp.log(jnp.asarray(p))[None], jnp.log(jnp.asarray(q))[None],
                                       "k3"))[0]
    np.testing.assert_allclose(float(np.sum(p * k3)), float(np.sum(p * np.log(p / q))), rtol=1e-5)
    assert np.all(k3 >= 0)


def test_masked_mean_empty_mask_is_zero():
    assert float(losses.masked_mean(jnp.ones((2, 3)), jnp.zeros((2, 3)))) == 0.0


def test_token_logp_and_entropy_against_numpy():
    logits = np.random.default_rng(0).normal(size=(2, 3, 5))
    targets = np.array([[0, 4, 2], [1, 1, 3]])
    lp, ent = losses.token_logp_and_entropy(jnp.asarray(logits, jnp.float32), jnp.asarray(targets),
                                            temperature=0.5)
    z = logits / 0.5
    logq = z - np.log(np.exp(z).sum(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(lp), np.take_along_axis(logq, targets[..., None], -1)[..., 0],
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ent), -(np.exp(logq) * logq).sum(-1), rtol=1e-5)


P = np.array([0.1, 0.2, 0.3, 0.4])


def _expected(kind, p, q):
    """E_{x~p}[k(x)] computed exactly by enumerating the categorical support."""
    k = np.asarray(losses.kl_estimate(jnp.log(jnp.asarray(p))[None], jnp.log(jnp.asarray(q))[None],
                                      kind))[0]
    return float(np.sum(p * k))


@pytest.mark.parametrize("q", [np.array([0.25, 0.25, 0.4, 0.1]), np.array([0.1, 0.2, 0.35, 0.35])])
def test_kl_estimators_against_exact_kl(q):
    exact = float(np.sum(P * np.log(P / q)))
    np.testing.assert_allclose(_expected("k1", P, q), exact, rtol=1e-5)  # unbiased
    np.testing.assert_allclose(_expected("k3", P, q), exact, rtol=1e-5)  # unbiased
    k2 = _expected("k2", P, q)
    assert abs(k2 - exact) > 1e-3 * exact, "k2 should be biased"


def test_k2_bias_shrinks_for_nearby_policies():
    """E[k2] matches KL to second order: 34% off for a far q, 0.5% for a near one."""
    far, near = np.array([0.25, 0.25, 0.4, 0.1]), np.array([0.1, 0.2, 0.35, 0.35])
    rel = lambda q: abs(_expected("k2", P, q) / float(np.sum(P * np.log(P / q))) - 1)
    np.testing.assert_allclose(rel(far), 0.33673, rtol=1e-3)
    np.testing.assert_allclose(rel(near), 0.005143, rtol=1e-2)


def test_k2_bias_hand_computed():
    # p = [.5, .5], q = [.25, .75]: log r = log(q/p) = [log .5, log 1.5]
    p, q = np.array([0.5, 0.5]), np.array([0.25, 0.75])
    want_k2 = 0.5 * (0.5 * np.log(0.5) ** 2 + 0.5 * np.log(1.5) ** 2)  # 0.161214
    np.testing.assert_allclose(_expected("k2", p, q), want_k2, rtol=1e-5)
    np.testing.assert_allclose(want_k2, 0.161214, rtol=1e-5)
    exact = float(np.sum(p * np.log(p / q)))  # 0.143841
    np.testing.assert_allclose(exact, 0.143841, rtol=1e-5)


def test_kl_clamp_prevents_overflow():
    k3 = losses.kl_estimate(jnp.array([[-200.0]]), jnp.array([[0.0]]), "k3", clamp=20.0)
    assert np.isfinite(float(k3[0, 0]))
    with pytest.raises(ValueError, match="k4"):
        losses.kl_estimate(jnp.zeros((1, 1)), jnp.zeros((1, 1)), "k4")


def test_aggregation_length_bias_pinned():
    """A short (2 tokens) and a long (6 tokens) wrong answer, both A = -1 at ratio 1. The
    gradient w.r.t. each token's log-prob is the weight that mode gives the token."""
    mask = jnp.array([[1.0, 1.0, 0, 0, 0, 0, 0, 0], [1.0, 1, 1, 1, 1, 1, 0, 0]])
    adv = jnp.array([-1.0, -1.0])
    logp = jnp.full((2, 8), -1.0)

    def weights(mode):
        def loss(lp):
            per_tok, _ = losses.clipped_surrogate(lp, jax.lax.stop_gradient(lp),
                                                  jnp.broadcast_to(adv[:, None], lp.shape), 0.2, 0.2)
            return losses.aggregate(per_tok, mask, mode, norm_tokens=8)
        return np.asarray(jax.grad(loss)(logp))  # d loss / d logp = weight * (-A) = weight

    pinned = {  # (weight per short-answer token, per long-answer token, long answer's total)
        "token-mean": (1 / 8, 1 / 8, 6 / 8),
        "seq-mean-token-mean": (1 / 4, 1 / 12, 1 / 2),   # GRPO: the long answer is let off
        "seq-mean-token-sum": (1 / 2, 1 / 2, 3.0),
        "seq-mean-token-sum-norm": (1 / 16, 1 / 16, 6 / 16),
    }
    for mode, (short, long, long_total) in pinned.items():
        w = weights(mode)
        np.testing.assert_allclose(w[0, :2], short, rtol=1e-6, err_msg=mode)
        np.testing.assert_allclose(w[1, :6], long, rtol=1e-6, err_msg=mode)
        np.testing.assert_allclose(w[1].sum(), long_total, rtol=1e-6, err_msg=mode)
        assert np.all(w * (1 - np.asarray(mask)) == 0), mode


def test_aggregation_ignores_empty_sequences():
    x = jnp.ones((3, 4))
    mask = jnp.array([[1.0, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    assert float(losses.aggregate(x, mask, "seq-mean-token-sum")) == 3.0  # (2 + 4) / 2
    assert float(losses.aggregate(x, mask, "seq-mean-token-mean")) == 1.0


def test_dual_clip_boundaries():
    old = jnp.zeros((1, 4))
    ratio = jnp.array([[5.0, 2.0, 5.0, 0.5]])
    adv = jnp.array([[-1.0, -1.0, 1.0, -1.0]])
    loss, ind = losses.clipped_surrogate(jnp.log(ratio), old, adv, 0.2, 0.28, dual_clip_c=3.0)
    # A=-1, r=5: max(5, 1.28) = 5, capped at 3.  A=-1, r=2: 2 < 3, kept.
    # A=+1, r=5: max(-5, -1.28) = -1.28 (ordinary clip).  A=-1, r=0.5: max(0.5, 0.8) = 0.8.
    np.testing.assert_allclose(np.asarray(loss), [[3.0, 2.0, -1.28, 0.8]], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(ind["clip_dual"]), [[1, 0, 0, 0]])
    no_dual, _ = losses.clipped_surrogate(jnp.log(ratio), old, adv, 0.2, 0.28)
    np.testing.assert_allclose(np.asarray(no_dual), [[5.0, 2.0, -1.28, 0.8]], rtol=1e-6)
    # The capped token has no gradient (it is a constant -c * A).
    g = jax.grad(lambda lp: losses.clipped_surrogate(lp, old, adv, 0.2, 0.28, 3.0)[0].sum())(
        jnp.log(ratio))
    assert float(g[0, 0]) == 0.0 and float(g[0, 1]) != 0.0


def test_gspo_sequence_ratio_hand_computed():
    # Sequence 0: token log-ratios [0.1, 0.3] -> mean 0.2 -> s = e^0.2 = 1.2214 > 1 + 4e-4
    # Sequence 1: log-ratios [0.0, 0.0, 0.0002 * 3] masked to the first 3 tokens -> mean 2e-4
    logp = jnp.array([[0.1, 0.3, 0.0], [0.0, 0.0, 6e-4]])
    mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = jnp.array([1.0, -2.0])
    loss, ind = losses.gspo_surrogate(logp, jnp.zeros_like(logp), adv, mask, 3e-4, 4e-4)
    s0, s1 = np.exp(0.2), np.exp(2e-4)
    # seq 0 (A=1): max(-s0, -(1+4e-4)) = -1.0004 (clipped high). seq 1 (A=-2): s1 inside
    # [1-3e-4, 1+4e-4] -> 2 * s1.
    np.testing.assert_allclose(np.asarray(loss), [-(1 + 4e-4), 2 * s1], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ind["seq_ratio"]), [s0, s1], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(ind["clip_high"]), [1.0, 0.0])


def test_policy_gradient_loss_options_compose_the_pieces():
    rng = np.random.default_rng(3)
    logp = jnp.asarray(-rng.uniform(0.1, 2, size=(4, 5)), jnp.float32)
    old = logp + jnp.asarray(rng.normal(scale=0.3, size=(4, 5)), jnp.float32)
    ref = logp + jnp.asarray(rng.normal(scale=0.3, size=(4, 5)), jnp.float32)
    adv = jnp.array([1.0, -1.0, 0.5, -2.0])
    mask = jnp.asarray((np.arange(5)[None] < np.array([[5], [3], [1], [4]])), jnp.float32)
    common = dict(eps_low=0.2, eps_high=0.28, kl_coef=0.05, norm_tokens=5)
    for agg in losses.AGGREGATIONS:
        loss, m = losses.policy_gradient_loss(logp, old, ref, adv[:, None] * mask, mask, jnp.zeros_like(logp), loss_agg=agg,
                                   kl_estimator="k2", dual_clip_c=3.0, **common)
        pg, _ = losses.clipped_surrogate(logp, old, jnp.broadcast_to(adv[:, None], logp.shape),
                                         0.2, 0.28, 3.0)
        want = (losses.aggregate(pg, mask, agg, 5)
                + 0.05 * losses.aggregate(losses.kl_estimate(logp, ref, "k2"), mask, agg, 5))
        np.testing.assert_allclose(float(loss), float(want), rtol=1e-6, err_msg=agg)
    loss, m = losses.policy_gradient_loss(logp, old, None, adv[:, None] * mask, mask, jnp.zeros_like(logp),
                               policy_loss="gspo", eps_low=3e-4, eps_high=4e-4, kl_coef=0.0)
    per_seq, _ = losses.gspo_surrogate(logp, old, adv, mask, 3e-4, 4e-4)
    np.testing.assert_allclose(float(loss), float(jnp.mean(per_seq)), rtol=1e-6)


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


@pytest.mark.parametrize("chunk", [1, 3, 4, 16])
def test_chunked_logp_equals_the_full_head_values_and_gradients(chunk):
    """The head in chunks of tokens (recomputed in the backward pass) gives the full path's
    log-probs, entropies and gradients (params and hidden) to float32 rounding, whether the
    chunk divides R (4), does not (3: the last chunk padded), or covers it (16)."""
    rng = np.random.default_rng(0)
    b, r, d, v = 3, 10, 8, 37
    hidden = jnp.asarray(rng.normal(size=(b, r, d)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(d, v)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, v, size=(b, r)), jnp.int32)
    weights = jnp.asarray(rng.normal(size=(b, r)), jnp.float32)

    def total(w, hidden, chunk):
        logp, ent = losses.chunked_logp_and_entropy(hidden, lambda h: h @ w, targets, 0.7, chunk)
        return jnp.sum(weights * logp) + 0.1 * jnp.sum(ent), (logp, ent)

    grad = jax.jit(jax.grad(total, argnums=(0, 1), has_aux=True), static_argnums=2)
    (gw_full, gh_full), (logp_full, ent_full) = grad(w, hidden, 0)
    (gw, gh), (logp, ent) = grad(w, hidden, chunk)
    ref_logp, ref_ent = losses.token_logp_and_entropy(hidden @ w, targets, 0.7)
    np.testing.assert_allclose(np.asarray(logp_full), np.asarray(ref_logp), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(logp), np.asarray(logp_full), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ent), np.asarray(ent_full), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(gw_full), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gh), np.asarray(gh_full), rtol=1e-5, atol=1e-6)
    assert float(jnp.abs(gh_full).max()) > 1e-3


def test_behaviour_weights_against_float64():
    """Truncated importance weights sampler -> proximal policy, token and sequence level."""
    rng = np.random.default_rng(0)
    prox = np.log(rng.uniform(0.1, 0.9, (3, 4)))
    behav = prox - rng.normal(0.0, 0.6, (3, 4))
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], np.float64)
    raw = np.exp(prox - behav)
    for level, want_raw in (("token", raw), ("sequence", np.broadcast_to(
            np.exp(((prox - behav) * mask).sum(1, keepdims=True)), mask.shape))):
        w, m = losses.behaviour_weights(jnp.asarray(prox, jnp.float32),
                                        jnp.asarray(behav, jnp.float32),
                                        jnp.asarray(mask, jnp.float32), 2.0, level)
        want = np.minimum(want_raw, 2.0) * mask
        np.testing.assert_allclose(np.asarray(w), want, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(float(m["is_weight_mean"]), want.sum() / mask.sum(),
                                   rtol=1e-5)
        np.testing.assert_allclose(float(m["is_capped_frac"]),
                                   ((want_raw > 2.0) * mask).sum() / mask.sum(), rtol=1e-6)
        np.testing.assert_allclose(float(m["is_weight_max"]), (want_raw * mask).max(),
                                   rtol=1e-5)


@pytest.mark.parametrize("level", ["token_mask", "sequence_mask", "geo_mask"])
def test_masked_importance_weights_against_float64(level):
    """Masked corrections (IcePop's token mask, the sequence and geometric-mean masks): a
    token (sequence) whose weight (product, geometric mean) leaves [lo, hi] weighs 0, the
    others rho; the masked share is reported; a mask that drops every token gives a zero
    gradient, not NaN."""
    rng = np.random.default_rng(1)
    prox = np.log(rng.uniform(0.1, 0.9, (4, 5)))
    behav = prox - rng.normal(0.0, 0.5, (4, 5))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]],
                    np.float64)
    log_rho = (prox - behav) * mask
    if level == "token_mask":
        test = log_rho
    else:
        test = np.broadcast_to(log_rho.sum(1, keepdims=True)
                               / (mask.sum(1, keepdims=True) if level == "geo_mask" else 1.0),
                               mask.shape)
    keep = (test >= np.log(0.7)) & (test <= np.log(1.4))
    want = np.where(keep, np.exp(log_rho), 0.0) * mask
    w, m = losses.behaviour_weights(jnp.asarray(prox, jnp.float32),
                                    jnp.asarray(behav, jnp.float32),
                                    jnp.asarray(mask, jnp.float32), 2.0, level,
                                    bounds=(0.7, 1.4))
    np.testing.assert_allclose(np.asarray(w), want, rtol=1e-5, atol=1e-7)
    assert float(m["is_masked_frac"]) == pytest.approx(((~keep) * mask).sum() / mask.sum())
    assert 0 < float(m["is_masked_frac"]) < 1, "the draw masks some tokens and keeps some"
    logp = jnp.asarray(prox, jnp.float32)
    zero = jnp.zeros_like(logp)
    grad = jax.grad(lambda lp: losses.policy_gradient_loss(
        lp, jnp.asarray(behav, jnp.float32), None, jnp.ones_like(lp), jnp.asarray(mask),
        zero, eps_low=0.2, eps_high=0.28, kl_coef=0.0, prox_logp_B_R=logp,
        is_weights_B_R=jnp.zeros_like(lp))[0])(logp)
    assert np.all(np.asarray(grad) == 0.0)


def test_the_decoupled_loss_values_and_gradients_against_float64():
    """L = w * max(-A r, -A clip(r)) with r = pi / pi_prox, w = min(pi_prox / mu, C): values
    and d/dlogp against float64; with pi_prox = mu it is the ordinary loss exactly."""
    logp, old, adv, mask = _loss_inputs()
    prox = old + jnp.log(jnp.array([[1.2, 0.9, 3.0], [1.0, 0.5, 2.0]]))
    opts = dict(eps_low=0.2, eps_high=0.28, kl_coef=0.0)
    adv_B_R = adv[:, None] * mask

    def decoupled(lp):
        w, _ = losses.behaviour_weights(prox, old, mask, 2.0, "token")
        return losses.policy_gradient_loss(lp, old, None, adv_B_R, mask, jnp.zeros_like(lp),
                                           **opts, prox_logp_B_R=prox, is_weights_B_R=w)[0]

    lp64, prox64, old64 = (np.asarray(x, np.float64) for x in (logp, prox, old))
    a64, m64 = np.asarray(adv_B_R, np.float64), np.asarray(mask, np.float64)
    r = np.exp(lp64 - prox64)
    w = np.minimum(np.exp(prox64 - old64), 2.0) * m64
    unclipped, clipped = -a64 * r, -a64 * np.clip(r, 0.8, 1.28)
    want = (w * np.maximum(unclipped, clipped)).sum() / m64.sum()
    np.testing.assert_allclose(float(decoupled(logp)), want, rtol=1e-5)
    # The gradient flows through r only, where the unclipped branch is the max.
    grad = np.where(unclipped >= clipped, -a64 * r * w, 0.0) / m64.sum()
    np.testing.assert_allclose(np.asarray(jax.grad(decoupled)(logp)), grad, rtol=1e-5,
                               atol=1e-7)
    # pi_prox = mu (no mismatch): weights 1 below the cap, the ordinary loss bitwise.
    w1, _ = losses.behaviour_weights(old, old, mask, 2.0, "token")
    same = losses.policy_gradient_loss(logp, old, None, adv_B_R, mask, jnp.zeros_like(logp),
                                       **opts, prox_logp_B_R=old, is_weights_B_R=w1)[0]
    plain = losses.policy_gradient_loss(logp, old, None, adv_B_R, mask, jnp.zeros_like(logp),
                                        **opts)[0]
    assert float(same) == float(plain)
