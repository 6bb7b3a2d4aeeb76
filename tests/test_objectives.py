"""The table of objectives (rlvr_jax/objectives): clip and gspo through the table give the
values the surrogates give directly (float64 numpy references in tests/test_losses.py), a
mask that drops every token gives a zero gradient, and conf/README.md's "Adding an
objective" example works as written (registered, composed, its loss against numpy)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax import losses, objectives
from rlvr_jax.config import conf_dir
from tests.helpers import run_config



def _batch(seed=0, b=4, r=6):
    rng = np.random.default_rng(seed)
    logp = jnp.asarray(rng.normal(-1.0, 0.3, (b, r)), jnp.float32)
    old = logp + jnp.asarray(rng.normal(0, 0.2, (b, r)), jnp.float32)
    adv = jnp.asarray(np.repeat(rng.normal(size=(b, 1)), r, 1), jnp.float32)
    mask = jnp.asarray((rng.random((b, r)) < 0.8).astype(np.float32))
    return logp, old, adv, mask


@pytest.mark.parametrize("name", sorted(objectives.specs()))
def test_every_objective_gives_a_zero_gradient_on_an_empty_mask(name):
    logp, old, adv, mask = _batch()
    grad = jax.grad(lambda lp: losses.policy_gradient_loss(
        lp, old, None, adv, jnp.zeros_like(mask), jnp.zeros_like(lp), eps_low=0.2,
        eps_high=0.28, kl_coef=0.0, policy_loss=name)[0])(logp)
    assert np.all(np.asarray(grad) == 0.0) and np.all(np.isfinite(np.asarray(grad)))


def test_the_documented_example_objective_works_as_written():
    text = open(f"{conf_dir()}/README.md").read()
    code = re.search(r"```python\n# my_package/capped_pg.py.*?\n(.*?)```", text, re.S).group(1)
    scope = {"__name__": "capped_pg_example"}
    exec(compile(code, "conf/README.md", "exec"), scope)
    assert "capped_pg" in objectives.specs()
    cfg = run_config(["algo.loss.kind=capped_pg", "+algo.loss.options.max_ratio=3"])
    assert cfg.algo.loss.objective_options().max_ratio == 3
    with pytest.raises(Exception, match="algo.loss.options.max_ratio"):
        run_config(["algo.loss.kind=capped_pg", "+algo.loss.options.max_ratio=0.5"])
    logp, old, adv, mask = _batch(1)
    loss, metrics = losses.policy_gradient_loss(
        logp, old, None, adv, mask, jnp.zeros_like(logp), eps_low=0.2, eps_high=0.28,
        kl_coef=0.0, policy_loss="capped_pg", objective_options=(("max_ratio", 1.1),))
    ratio = np.exp(np.float64(logp) - np.float64(old))
    m = np.float64(mask)
    want = np.sum(-np.float64(adv) * np.minimum(ratio, 1.1) * m) / m.sum()  # token-mean
    assert np.isclose(float(loss), want, rtol=1e-5)
    assert np.isclose(float(metrics["ratio_cut_frac"]), np.sum((ratio > 1.1) * m) / m.sum())


@pytest.mark.parametrize("name", ["clip", "gspo"])
def test_clip_and_gspo_through_the_table_equal_their_surrogates(name):
    logp, old, adv, mask = _batch(2)
    loss, metrics = losses.policy_gradient_loss(
        logp, old, None, adv, mask, jnp.zeros_like(logp), eps_low=0.1, eps_high=0.15,
        kl_coef=0.0, policy_loss=name, dual_clip_c=3.0 if name == "clip" else 0.0)
    m = np.asarray(mask)
    if name == "clip":
        per_tok, ind = losses.clipped_surrogate(logp, old, adv, 0.1, 0.15, 3.0)
        want = float(jnp.sum(per_tok * mask) / jnp.sum(mask))
        assert float(metrics["clip_frac_dual"]) == float(jnp.sum(ind["clip_dual"] * mask)
                                                         / jnp.sum(mask))
    else:
        adv_b = jnp.sum(adv * mask, 1) / jnp.maximum(jnp.sum(mask, 1), 1.0)
        per_seq, _ = losses.gspo_surrogate(logp, old, adv_b, mask, 0.1, 0.15)
        alive = m.sum(1) > 0
        want = float(np.sum(np.asarray(per_seq)[alive]) / alive.sum())
    assert float(loss) == pytest.approx(want, rel=1e-6)


def test_cispo_value_and_gradient_against_float64_numpy():
    """L = -sg(clip(r, 1 - lo, 1 + hi)) A logp, token-mean: its value, and its gradient
    -clip(r) A m / n (the weight is detached), against numpy in float64; on-policy (r = 1)
    its gradient is the clipped surrogate's (REINFORCE's)."""
    logp, old, adv, mask = _batch(3)
    opts = (("eps_high_is", 0.1), ("eps_low_is", 0.5))

    def loss(lp, anchor):
        return losses.policy_gradient_loss(lp, anchor, None, adv, mask, jnp.zeros_like(lp),
                                           eps_low=0.2, eps_high=0.28, kl_coef=0.0,
                                           policy_loss="cispo", objective_options=opts)[0]

    lp, o, a, m = (np.asarray(v, np.float64) for v in (logp, old, adv, mask))
    w = np.clip(np.exp(lp - o), 0.5, 1.1)
    n = m.sum()
    assert float(loss(logp, old)) == pytest.approx(np.sum(-w * a * lp * m) / n, rel=1e-5)
    np.testing.assert_allclose(np.asarray(jax.grad(loss)(logp, old)), -w * a * m / n,
                               rtol=1e-5, atol=1e-8)
    clip_grad = jax.grad(lambda lp: losses.policy_gradient_loss(
        lp, jax.lax.stop_gradient(lp), None, adv, mask, jnp.zeros_like(lp), eps_low=0.2,
        eps_high=0.28, kl_coef=0.0, policy_loss="clip")[0])(logp)
    on_policy = jax.grad(lambda lp: loss(lp, jax.lax.stop_gradient(lp)))(logp)
    np.testing.assert_allclose(np.asarray(on_policy), np.asarray(clip_grad), rtol=1e-6)
    _, metrics = losses.policy_gradient_loss(logp, old, None, adv, mask, jnp.zeros_like(logp),
                                             eps_low=0.2, eps_high=0.28, kl_coef=0.0,
                                             policy_loss="cispo", objective_options=opts)
    r = np.exp(lp - o)
    assert float(metrics["clip_frac_high"]) == pytest.approx(np.sum((r > 1.1) * m) / n)


def test_sapo_value_gradient_and_on_policy_identity():
    """L = -A (4/tau) sigmoid(tau (r - 1)), tau by the sign of A: value and gradient
    (-A 4 s (1 - s) r m / n) against float64 numpy; on-policy, the policy gradient."""
    logp, old, adv, mask = _batch(4)
    opts = (("tau_neg", 2.0), ("tau_pos", 0.5))

    def loss(lp, anchor):
        return losses.policy_gradient_loss(lp, anchor, None, adv, mask, jnp.zeros_like(lp),
                                           eps_low=0.2, eps_high=0.28, kl_coef=0.0,
                                           policy_loss="sapo", objective_options=opts)[0]

    lp, o, a, m = (np.asarray(v, np.float64) for v in (logp, old, adv, mask))
    r = np.exp(lp - o)
    tau = np.where(a > 0, 0.5, 2.0)
    s = 1.0 / (1.0 + np.exp(-tau * (r - 1.0)))
    n = m.sum()
    assert float(loss(logp, old)) == pytest.approx(np.sum(-a * 4 / tau * s * m) / n, rel=1e-5)
    np.testing.assert_allclose(np.asarray(jax.grad(loss)(logp, old)),
                               -a * 4 * s * (1 - s) * r * m / n, rtol=1e-4, atol=1e-7)
    on_policy = jax.grad(lambda lp: loss(lp, jax.lax.stop_gradient(lp)))(logp)
    np.testing.assert_allclose(np.asarray(on_policy), -a * m / n, rtol=1e-5, atol=1e-8)


def test_gmpo_value_gradient_and_on_policy_identity():
    """L_b = -A_b exp(mean_t c_t), c the sign-pessimistic log-clipped log-ratio: value against
    float64 numpy; on-policy its gradient is -A_b m / n_b, averaged over sequences."""
    logp, old, adv, mask = _batch(5)
    opts = (("log_eps_high", 0.1), ("log_eps_low", 0.15))

    def loss(lp, anchor):
        return losses.policy_gradient_loss(lp, anchor, None, adv, mask, jnp.zeros_like(lp),
                                           eps_low=0.2, eps_high=0.28, kl_coef=0.0,
                                           policy_loss="gmpo", objective_options=opts)[0]

    lp, o, a, m = (np.asarray(v, np.float64) for v in (logp, old, adv, mask))
    n_b = np.maximum(m.sum(1), 1.0)
    a_b = (a * m).sum(1) / n_b
    d = lp - o
    sg = np.sign(a_b)[:, None]
    c = sg * np.minimum(sg * d, sg * np.clip(d, -0.15, 0.1))
    alive = m.sum(1) > 0
    want = np.sum((-a_b * np.exp((c * m).sum(1) / n_b))[alive]) / alive.sum()
    assert float(loss(logp, old)) == pytest.approx(want, rel=1e-5)
    on_policy = jax.grad(lambda lp: loss(lp, jax.lax.stop_gradient(lp)))(logp)
    np.testing.assert_allclose(np.asarray(on_policy),
                               (-a_b[:, None] * m / n_b[:, None]) / alive.sum(),
                               rtol=1e-5, atol=1e-8)


def test_kl_cov_penalises_exactly_the_top_covariance_tokens():
    """KL-Cov: the ceil(ratio n) valid tokens of largest (logp - mean)(A - mean) get
    beta |logp - anchor| on top of -A r; value against float64 numpy; ratio 0 is the plain
    unclipped surrogate; on-policy the penalty's value and gradient are 0 (|d| at d = 0)."""
    logp, old, adv, mask = _batch(6)
    adv = adv + jnp.asarray(np.random.default_rng(7).normal(0, 0.1, adv.shape), jnp.float32)
    opts = (("kl_cov_beta", 0.5), ("kl_cov_ratio", 0.2))

    def loss(lp, anchor, options=opts):
        return losses.policy_gradient_loss(lp, anchor, None, adv, mask, jnp.zeros_like(lp),
                                           eps_low=0.2, eps_high=0.28, kl_coef=0.0,
                                           policy_loss="kl_cov", objective_options=options)

    lp, o, a, m = (np.asarray(v, np.float64) for v in (logp, old, adv, mask))
    n = m.sum()
    cov = (lp - (lp * m).sum() / n) * (a - (a * m).sum() / n)
    k = int(np.ceil(0.2 * n))
    top = np.argsort(np.where(m > 0, cov, -np.inf).ravel())[::-1][:k]
    sel = np.zeros(m.size)
    sel[top] = 1
    sel = sel.reshape(m.shape)
    d = lp - o
    want = np.sum((-a * np.exp(d) + 0.5 * sel * np.abs(d)) * m) / n
    value, metrics = loss(logp, old)
    assert float(value) == pytest.approx(want, rel=1e-5)
    assert float(metrics["kl_cov_frac"]) == pytest.approx(k / n)
    plain = np.sum(-a * np.exp(d) * m) / n
    assert float(loss(logp, old, (("kl_cov_ratio", 0.0),))[0]) == pytest.approx(plain, rel=1e-5)
    on_policy = jax.grad(lambda lp: loss(lp, jax.lax.stop_gradient(lp))[0])(logp)
    np.testing.assert_allclose(np.asarray(on_policy), -a * m / n, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("name", ["dppo_tv", "dppo_kl"])
def test_dppo_masks_exactly_the_tokens_outside_its_trust_region(name):
    """DPPO: L = -A sg(min(r, C)) logp on the tokens inside the region, 0 outside; value,
    gradient and masked share against float64 numpy (the binary KL written out); on-policy
    every token is inside and the gradient is the policy gradient's."""
    logp, old, adv, mask = _batch(8)
    logp = jnp.minimum(logp + 0.6 * jnp.asarray(np.random.default_rng(9).normal(
        size=logp.shape), jnp.float32), -1e-3)  # far enough that some tokens leave
    opts = (("delta_high", 0.05), ("delta_low", 0.08), ("ratio_cap", 3.0))

    def loss(lp, anchor):
        return losses.policy_gradient_loss(lp, anchor, None, adv, mask, jnp.zeros_like(lp),
                                           eps_low=0.2, eps_high=0.28, kl_coef=0.0,
                                           policy_loss=name, objective_options=opts)

    lp, o, a, m = (np.asarray(v, np.float64) for v in (logp, old, adv, mask))
    p, q = np.exp(lp), np.exp(o)
    if name == "dppo_tv":
        valid = np.where(a > 0, p - q <= 0.05, p - q >= -0.08)
    else:
        d = q * np.log(q / p) + (1 - q) * np.log((1 - q) / (1 - p))
        valid = np.where(a > 0, (d <= 0.05) | (p <= q), (d <= 0.08) | (p >= q))
    w = np.minimum(p / q, 3.0)
    n = m.sum()
    value, metrics = loss(logp, old)
    assert 0 < np.sum((~valid) * m) < n  # the case is not vacuous
    assert float(value) == pytest.approx(np.sum(-a * w * lp * valid * m) / n, rel=1e-5)
    assert float(metrics["dppo_masked_frac"]) == pytest.approx(np.sum((~valid) * m) / n)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda lp: loss(lp, old)[0])(logp)),
                               -a * w * valid * m / n, rtol=1e-5, atol=1e-8)
    on_policy = jax.grad(lambda lp: loss(lp, jax.lax.stop_gradient(lp))[0])(logp)
    np.testing.assert_allclose(np.asarray(on_policy), -a * m / n, rtol=1e-5, atol=1e-8)


def test_binary_kl_is_exact_near_probability_one():
    from rlvr_jax.objectives.dppo import binary_kl

    # 1 - p ~ 3e-7: float32's 1 - exp(logp) is all rounding there
    lq, lp = np.float64(np.float32(-1e-7)), np.float64(np.float32(-3e-7))
    want = np.exp(lq) * (lq - lp) + (1 - np.exp(lq)) * np.log(np.expm1(lq) / np.expm1(lp))
    got = float(binary_kl(jnp.float32(lq), jnp.float32(lp)))
    assert got == pytest.approx(want, rel=1e-3) and np.isfinite(got)


def test_clip_cov_detaches_a_random_share_of_the_in_band_tokens():
    """Clip-Cov: the value is the clipped surrogate's; the gradient is the surrogate's except
    on max(floor(ratio n), 1) tokens drawn from those with lb < cov < ub and not clipped,
    where it is 0; the same key draws the same tokens, another key others; a band no token
    is in leaves the clip's gradient whole."""
    logp, old, adv, mask = _batch(10, b=8, r=16)
    adv = adv * 4.0
    lp, o, a, m = (np.asarray(v, np.float64) for v in (logp, old, adv, mask))
    n = m.sum()
    cov = (lp - (lp * m).sum() / n) * (a - (a * m).sum() / n)
    opts = (("clip_cov_ratio", 0.05), ("clip_cov_lb", 0.05), ("clip_cov_ub", 5.0))

    def run(key, options=opts):
        f = lambda lp: losses.policy_gradient_loss(
            lp, old, None, adv, mask, jnp.zeros_like(lp), eps_low=0.2, eps_high=0.28,
            kl_coef=0.0, policy_loss="clip_cov", objective_options=options, key=key)
        return f(logp), np.asarray(jax.grad(lambda lp: f(lp)[0])(logp))

    clip_grad = np.asarray(jax.grad(lambda lp: losses.policy_gradient_loss(
        lp, old, None, adv, mask, jnp.zeros_like(lp), eps_low=0.2, eps_high=0.28,
        kl_coef=0.0, policy_loss="clip")[0])(logp))
    r = np.exp(lp - o)
    clipped = -a * np.clip(r, 0.8, 1.28) > -a * r
    band = (m > 0) & ~clipped & (cov > 0.05) & (cov < 5.0)
    k = min(max(int(np.floor(0.05 * n)), 1), band.sum())
    assert band.sum() > k  # a draw, not all of the band
    (value, metrics), grad = run(jax.random.PRNGKey(1))
    per_tok, _ = losses.clipped_surrogate(logp, old, adv, 0.2, 0.28)
    assert float(value) == pytest.approx(float(jnp.sum(per_tok * mask) / n), rel=1e-6)
    detached = (grad == 0) & (clip_grad != 0)
    assert detached.sum() == k and np.all(band[detached])
    np.testing.assert_allclose(grad[~detached], clip_grad[~detached], rtol=1e-6)
    assert float(metrics["clip_cov_frac"]) == pytest.approx(k / n)
    assert np.array_equal(run(jax.random.PRNGKey(1))[1], grad)
    others = [((run(jax.random.PRNGKey(s))[1] == 0) & (clip_grad != 0)) for s in range(2, 6)]
    assert any(not np.array_equal(d, detached) for d in others)
    empty = (("clip_cov_ratio", 0.05), ("clip_cov_lb", 1e6), ("clip_cov_ub", 2e6))
    np.testing.assert_allclose(run(jax.random.PRNGKey(1), empty)[1], clip_grad, rtol=1e-6)
