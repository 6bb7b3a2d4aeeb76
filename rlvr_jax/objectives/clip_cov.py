"""Clip-Cov (Cui et al. 2025, arXiv:2505.22617, sec. 4, "The Entropy Mechanism of
Reinforcement Learning for Reasoning Language Models"): the policy's entropy falls through
the tokens whose log-probability and advantage covary most; Clip-Cov stops the gradient of a
few of them. Per token, over the valid tokens of the batch the loss sees at once:

    cov_t = (logp_t - mean(logp)) * (A_t - mean(A))                       (logp detached)
    C     = { t valid : omega_low < cov_t < omega_high, not clipped by PPO's clip }
    S     = floor(ratio * n) tokens of C drawn uniformly at random (at least 1 while C is not
            empty; all of C when it is smaller)
    L_t   = PPO's clipped surrogate (clip.py), its gradient stopped on S

The value of L is unchanged (the selected tokens still count in the reported loss); only
their gradient is removed. The draw takes the update's key (Inputs.key), so a run repeats
and resumes bit for bit. Reported: `clip_cov_frac` (the share of tokens detached) beside the
clip's own fractions. With `algo.microbatches` > 1 each microbatch draws its own share."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr_jax.config.choices import _check
from rlvr_jax.objectives.clip import clipped_surrogate
from rlvr_jax.objectives.registry import Inputs, ObjectiveSpec, Terms, register


@dataclass(frozen=True)
class ClipCovOptions:
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    clip_cov_ratio: float = 2e-4  # the share of valid tokens detached
    clip_cov_lb: float = 1.0  # omega_low
    clip_cov_ub: float = 5.0  # omega_high

    def check(self, key: str) -> None:
        _check(0 <= self.clip_eps_low < 1 and self.clip_eps_high >= 0, f"{key}.clip_eps_low",
               "need 0 <= clip_eps_low < 1 and clip_eps_high >= 0")
        _check(0.0 <= self.clip_cov_ratio <= 1.0, f"{key}.options.clip_cov_ratio",
               "must be in [0, 1]")
        _check(self.clip_cov_lb < self.clip_cov_ub, f"{key}.options.clip_cov_lb",
               "must be below clip_cov_ub")


def covariance(logp_B_R, adv_B_R, mask_B_R):
    """(logp - mean logp) (A - mean A) per token, the means over the valid tokens, logp
    detached."""
    import jax
    import jax.numpy as jnp

    m = mask_B_R.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(m), 1.0)
    lp = jax.lax.stop_gradient(logp_B_R)
    return (lp - jnp.sum(lp * m) / n) * (adv_B_R - jnp.sum(adv_B_R * m) / n)


def clip_cov(x: Inputs, o: ClipCovOptions) -> Terms:
    import jax
    import jax.numpy as jnp

    loss_B_R, ind = clipped_surrogate(x.logp_B_R, x.anchor_logp_B_R, x.adv_B_R,
                                      o.clip_eps_low, o.clip_eps_high)
    ratio_B_R = ind["ratio"]
    clipped_B_R = (-x.adv_B_R * jnp.clip(ratio_B_R, 1 - o.clip_eps_low, 1 + o.clip_eps_high)
                   > -x.adv_B_R * ratio_B_R)
    m = x.mask_B_R > 0
    cov_B_R = covariance(x.logp_B_R, x.adv_B_R, x.mask_B_R)
    cand_B_R = m & ~clipped_B_R & (cov_B_R > o.clip_cov_lb) & (cov_B_R < o.clip_cov_ub)
    key = jax.random.PRNGKey(0) if x.key is None else x.key
    # A uniform draw of k candidates: the k largest of i.i.d. uniforms over the candidates.
    u_B_R = jnp.where(cand_B_R, jax.random.uniform(key, cand_B_R.shape), -1.0)
    k = jnp.maximum(jnp.floor(o.clip_cov_ratio * jnp.sum(m)), 1.0).astype(jnp.int32)
    ranked = jnp.sort(u_B_R.ravel())[::-1]
    threshold = ranked[jnp.clip(k - 1, 0, ranked.shape[0] - 1)]
    selected_B_R = cand_B_R & (u_B_R >= threshold) & (o.clip_cov_ratio > 0)
    loss_B_R = jnp.where(selected_B_R, jax.lax.stop_gradient(loss_B_R), loss_B_R)
    return Terms(loss_B_R, {"clip_frac_low": ind["clip_low"], "clip_frac_high": ind["clip_high"],
                            "clip_cov_frac": selected_B_R.astype(jnp.float32)})


SPEC = register(ObjectiveSpec("clip_cov", clip_cov, ClipCovOptions, level="token",
                              doc="PPO's clip, the gradient stopped on a random few tokens of "
                                  "high log-prob x advantage covariance (Clip-Cov)"))
