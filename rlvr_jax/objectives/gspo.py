"""GSPO (Zheng et al. 2025, arXiv:2507.18071, eq. 5-7): one importance ratio per sequence,
the geometric mean of its token ratios, clipped per sequence with the sequence's mean
advantage (the paper uses eps of order 3e-4 / 4e-4, since a length-normalised ratio moves
far less than a token ratio):

    s_b = exp( sum_t m (logp - anchor_logp) / sum_t m )
    A_b = sum_t m A / sum_t m
    L_b = max(-A_b * s_b, -A_b * clip(s_b, 1 - eps_low, 1 + eps_high))

per sequence, averaged over sequences; fractions `clip_frac_low` / `clip_frac_high` per
sequence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlvr_jax.config.choices import _check
from rlvr_jax.objectives.registry import Inputs, ObjectiveSpec, Terms, register

if TYPE_CHECKING:
    import jax


@dataclass(frozen=True)
class GSPOOptions:
    clip_eps_low: float = 3e-4
    clip_eps_high: float = 4e-4

    def check(self, key: str) -> None:
        _check(0 <= self.clip_eps_low < 1 and self.clip_eps_high >= 0, f"{key}.clip_eps_low",
               "need 0 <= clip_eps_low < 1 and clip_eps_high >= 0")


def gspo_surrogate(logp_B_R: jax.Array, old_logp_B_R: jax.Array, adv_B: jax.Array,
                   mask_B_R: jax.Array, eps_low: float, eps_high: float) -> tuple[jax.Array, dict]:
    """(L_B per sequence, indicators: seq_ratio, clip_low, clip_high)."""
    import jax.numpy as jnp  # here: a config is checked without JAX
    m = mask_B_R.astype(jnp.float32)
    log_s_B = jnp.sum((logp_B_R - old_logp_B_R) * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)
    s_B = jnp.exp(log_s_B)
    loss_B = jnp.maximum(-adv_B * s_B, -adv_B * jnp.clip(s_B, 1.0 - eps_low, 1.0 + eps_high))
    return loss_B, {"seq_ratio": s_B,
                    "clip_low": ((adv_B < 0) & (s_B < 1.0 - eps_low)).astype(jnp.float32),
                    "clip_high": ((adv_B > 0) & (s_B > 1.0 + eps_high)).astype(jnp.float32)}


def gspo(x: Inputs, o: GSPOOptions) -> Terms:
    import jax.numpy as jnp  # here: a config is checked without JAX
    m = x.mask_B_R.astype(jnp.float32)
    adv_B = jnp.sum(x.adv_B_R * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)
    loss_B, ind = gspo_surrogate(x.logp_B_R, x.anchor_logp_B_R, adv_B, x.mask_B_R,
                                 o.clip_eps_low, o.clip_eps_high)
    return Terms(loss_B, {"clip_frac_low": ind["clip_low"], "clip_frac_high": ind["clip_high"]})


SPEC = register(ObjectiveSpec("gspo", gspo, GSPOOptions, level="sequence", decoupled=False,
                              doc="one clipped ratio per sequence, the geometric mean of its "
                                  "token ratios"))
