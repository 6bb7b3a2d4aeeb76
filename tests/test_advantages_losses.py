"""GRPO advantages and losses against hand-computed values (numbers worked out in comments)."""

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax import advantages, losses


def test_grpo_advantages_hand_computed():
    rewards = jnp.array([[1.0, 0.0, 0.0, 1.0],   # mean .5, std(ddof=1) = sqrt(1/3) -> +-0.866025
                         [1.0, 0.0, 0.0, 0.0],   # mean .25, std(ddof=1) = 0.5 -> 1.5, -0.5
                         [1.0, 1.0, 1.0, 1.0],   # constant: no signal -> exactly 0
                         [0.0, 0.0, 0.0, 0.0]])
    adv = np.asarray(jax.jit(advantages.grpo)(rewards))
    np.testing.assert_allclose(adv[0], [0.866025, -0.866025, -0.866025, 0.866025], rtol=1e-5)
    np.testing.assert_allclose(adv[1], [1.5, -0.5, -0.5, -0.5], rtol=1e-5)
    assert np.all(adv[2:] == 0.0) and np.all(np.isfinite(adv))  # not NaN (0/0)


def test_grpo_eps_and_unscaled_variant():
    rewards = jnp.array([[1.0, 0.0]])  # std(ddof=1) = 0.70711
    adv = np.asarray(advantages.grpo(rewards, eps=0.1))
    np.testing.assert_allclose(adv, [[0.5 / 0.807107, -0.5 / 0.807107]], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(advantages.grpo(rewards, scale_by_std=False)),
                               [[0.5, -0.5]], rtol=1e-6)


def _loss_inputs():
    # ratios: seq 0 [1.0, 1.5, 0.5] (A=+1), seq 1 [0.5, 1.5, 1.0] (A=-2, last token masked).
    old = jnp.log(jnp.array([[0.4, 0.2, 0.6], [0.5, 0.3, 0.1]]))
    ratio = jnp.array([[1.0, 1.5, 0.5], [0.5, 1.5, 1.0]])
    logp = old + jnp.log(ratio)
    adv = jnp.array([1.0, -2.0])
    mask = jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    return logp, old, adv, mask


def test_grpo_loss_hand_computed():
    logp, old, adv, mask = _loss_inputs()
    # Per token max(-A r, -A clip(r, 0.8, 1.28)):
    #   seq 0 (A=+1): r=1 -> -1;  r=1.5 -> max(-1.5, -1.28) = -1.28 (clip high);
    #                 r=0.5 -> max(-0.5, -0.8) = -0.5
    #   seq 1 (A=-2): r=0.5 -> max(1.0, 1.6) = 1.6 (clip low);  r=1.5 -> max(3.0, 2.56) = 3.0
    # token mean over 5 valid tokens: (-1 - 1.28 - 0.5 + 1.6 + 3.0) / 5 = 0.364
    loss, m = jax.jit(lambda *a: losses.grpo_loss(*a, eps_low=0.2, eps_high=0.28, kl_coef=0.0))(
        logp, old, None, adv[:, None] * mask, mask, jnp.zeros_like(logp))
    np.testing.assert_allclose(float(loss), 0.364, rtol=1e-5)
    np.testing.assert_allclose(float(m["clip_frac_low"]), 0.2, rtol=1e-6)
    np.testing.assert_allclose(float(m["clip_frac_high"]), 0.2, rtol=1e-6)
    np.testing.assert_allclose(float(m["ratio_mean"]), (1 + 1.5 + .5 + .5 + 1.5) / 5, rtol=1e-5)
    assert "kl_ref" not in m  # beta = 0 skips the KL term entirely

    # With beta = 0.1 and log pi_ref - log pi = log 2 on every token: k3 = 2 - ln 2 - 1.
    ref = logp + jnp.log(2.0)
    loss_kl, m = losses.grpo_loss(logp, old, ref, adv[:, None] * mask, mask, jnp.zeros_like(logp),
                                  eps_low=0.2, eps_high=0.28, kl_coef=0.1)
    k3 = 2.0 - np.log(2.0) - 1.0
    np.testing.assert_allclose(float(m["kl_ref"]), k3, rtol=1e-5)
    np.testing.assert_allclose(float(loss_kl), 0.364 + 0.1 * k3, rtol=1e-5)


def test_on_policy_gradient_is_reinforce():
    """At ratio 1 the gradient w.r.t. each token's log-prob is -A / (number of valid tokens)."""
    logp, _, adv, mask = _loss_inputs()
    grad = jax.grad(lambda lp: losses.grpo_loss(lp, jax.lax.stop_gradient(lp), None,
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
