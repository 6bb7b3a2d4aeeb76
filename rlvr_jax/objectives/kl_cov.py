"""KL-Cov (Cui et al. 2025, arXiv:2505.22617, "The Entropy Mechanism of Reinforcement
Learning for Reasoning Language Models"): entropy collapses through the few tokens whose
log-probability and advantage covary most; KL-Cov penalises only those. Per token, to
minimise:

    cov_t = (logp_t - mean(logp)) * (A_t - mean(A))       over the batch's valid tokens
                                                            (logp detached)
    S     = the ceil(ratio * n) valid tokens of largest cov_t
    L_t   = -A_t * r_t + beta * [t in S] * |logp_t - anchor_logp_t|,  r_t = exp(logp - anchor)

Unclipped elsewhere, as in the paper. The covariance is taken over the tokens the loss sees
at once: with `algo.microbatches` > 1 each microbatch picks its own top share. Reported:
`kl_cov_frac`, the share of tokens penalised."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr_jax.config.choices import _check
from rlvr_jax.objectives.clip_cov import covariance
from rlvr_jax.objectives.registry import Inputs, ObjectiveSpec, Terms, register


@dataclass(frozen=True)
class KLCovOptions:
    kl_cov_ratio: float = 2e-3  # the share of valid tokens penalised
    kl_cov_beta: float = 1.0

    def check(self, key: str) -> None:
        _check(0.0 <= self.kl_cov_ratio <= 1.0, f"{key}.options.kl_cov_ratio",
               "must be in [0, 1]")
        _check(self.kl_cov_beta >= 0.0, f"{key}.options.kl_cov_beta", "must be >= 0")


def kl_cov(x: Inputs, o: KLCovOptions) -> Terms:
    import jax
    import jax.numpy as jnp  # here: a config is checked without JAX

    m = x.mask_B_R.astype(jnp.float32)
    cov_B_R = covariance(x.logp_B_R, x.adv_B_R, x.mask_B_R)
    ranked = jnp.sort(jnp.where(m > 0, cov_B_R, -jnp.inf).ravel())[::-1]
    k = jnp.ceil(o.kl_cov_ratio * jnp.sum(m)).astype(jnp.int32)
    threshold = ranked[jnp.clip(k - 1, 0, ranked.shape[0] - 1)]
    selected_B_R = ((cov_B_R >= threshold) & (m > 0) & (k > 0)).astype(jnp.float32)
    d_B_R = x.logp_B_R - x.anchor_logp_B_R
    # |d| with the subgradient 0 at d = 0 (on-policy the penalty neither costs nor pulls)
    abs_B_R = jax.lax.stop_gradient(jnp.sign(d_B_R)) * d_B_R
    loss_B_R = -x.adv_B_R * jnp.exp(d_B_R) + o.kl_cov_beta * selected_B_R * abs_B_R
    return Terms(loss_B_R, {"kl_cov_frac": selected_B_R})


SPEC = register(ObjectiveSpec("kl_cov", kl_cov, KLCovOptions, level="token",
                              doc="a KL penalty on the tokens of highest log-prob x "
                                  "advantage covariance"))
