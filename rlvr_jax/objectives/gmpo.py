"""GMPO (geometric-mean policy optimisation, arXiv:2507.20673): the geometric mean of a sequence's token
ratios in place of their arithmetic mean, with each token's log-ratio clipped in log space
(a wider range than PPO's is stable here, e^(+-0.4)), one term per sequence, to minimise:

    d_t  = logp_t - anchor_logp_t
    c_t  = sign(A) * min(sign(A) d_t, sign(A) clip(d_t, -eps_low, eps_high))
    L_b  = -A_b * exp( sum_t m c_t / sum_t m )

with A_b the sequence's mean advantage (the sign is per sequence, so the min is PPO's
pessimistic choice for either sign). The geometric mean is less sensitive to one outlier
token than the arithmetic mean of GRPO's token ratios. On-policy (d = 0) its gradient is
-A_b m_t / n_b per token: the sequence-mean policy gradient. Fractions per sequence:
`clip_frac` (the share of its tokens whose log-ratio was clipped)."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr_jax.config.choices import _check
from rlvr_jax.objectives.registry import Inputs, ObjectiveSpec, Terms, register


@dataclass(frozen=True)
class GMPOOptions:
    log_eps_low: float = 0.4  # log-ratios clipped to [-log_eps_low, log_eps_high]
    log_eps_high: float = 0.4

    def check(self, key: str) -> None:
        _check(self.log_eps_low >= 0 and self.log_eps_high >= 0, f"{key}.options.log_eps_low",
               "log_eps_low and log_eps_high must be >= 0")


def gmpo(x: Inputs, o: GMPOOptions) -> Terms:
    import jax.numpy as jnp  # here: a config is checked without JAX

    m = x.mask_B_R.astype(jnp.float32)
    n_B = jnp.maximum(jnp.sum(m, axis=1), 1.0)
    adv_B = jnp.sum(x.adv_B_R * m, axis=1) / n_B
    sign_B_1 = jnp.sign(adv_B)[:, None]
    d_B_R = x.logp_B_R - x.anchor_logp_B_R
    clipped_B_R = jnp.clip(d_B_R, -o.log_eps_low, o.log_eps_high)
    c_B_R = sign_B_1 * jnp.minimum(sign_B_1 * d_B_R, sign_B_1 * clipped_B_R)
    loss_B = -adv_B * jnp.exp(jnp.sum(c_B_R * m, axis=1) / n_B)
    frac_B = jnp.sum((d_B_R != clipped_B_R) * m, axis=1) / n_B
    return Terms(loss_B, {"clip_frac": frac_B})


SPEC = register(ObjectiveSpec("gmpo", gmpo, GMPOOptions, level="sequence", decoupled=False,
                              doc="the geometric mean of a sequence's log-clipped token "
                                  "ratios"))
