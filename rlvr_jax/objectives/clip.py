"""PPO's clipped surrogate on token ratios (Schulman et al. 2017, arXiv:1707.06347), with
decoupled bounds (DAPO's clip-higher, arXiv:2503.14476) and dual clip (Ye et al. 2020,
arXiv:1912.09729), per token, to minimise:

    rho = exp(logp - anchor_logp)
    L   = max(-A * rho, -A * clip(rho, 1 - eps_low, 1 + eps_high))
    L   = min(L, -c * A)   where A < 0, if dual_clip_c = c > 1: a negative-advantage token
                           whose ratio has run away cannot dominate the batch

Fractions: `clip_frac_low` (A < 0 and rho < 1 - eps_low), `clip_frac_high` (A > 0 and
rho > 1 + eps_high), `clip_frac_dual`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlvr_jax.config.choices import _check
from rlvr_jax.objectives.registry import Inputs, ObjectiveSpec, Terms, register

if TYPE_CHECKING:
    import jax


@dataclass(frozen=True)
class ClipOptions:
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    dual_clip_c: float = 0.0

    def check(self, key: str) -> None:
        _check(0 <= self.clip_eps_low < 1 and self.clip_eps_high >= 0, f"{key}.clip_eps_low",
               "need 0 <= clip_eps_low < 1 and clip_eps_high >= 0")
        _check(self.dual_clip_c == 0.0 or self.dual_clip_c > 1.0, f"{key}.dual_clip_c",
               "must be 0 (off) or > 1")


def clipped_surrogate(logp_B_R: jax.Array, old_logp_B_R: jax.Array, adv_B_R: jax.Array,
                      eps_low: float, eps_high: float,
                      dual_clip_c: float = 0.0) -> tuple[jax.Array, dict]:
    """(L_B_R, indicators: ratio, clip_low, clip_high, clip_dual), as the module says."""
    import jax.numpy as jnp  # here: a config is checked without JAX
    ratio_B_R = jnp.exp(logp_B_R - old_logp_B_R)
    unclipped = -adv_B_R * ratio_B_R
    clipped = -adv_B_R * jnp.clip(ratio_B_R, 1.0 - eps_low, 1.0 + eps_high)
    loss_B_R = jnp.maximum(unclipped, clipped)
    dual_B_R = jnp.zeros_like(loss_B_R, dtype=bool)
    if dual_clip_c > 0.0:
        dual_B_R = (adv_B_R < 0) & (loss_B_R > -dual_clip_c * adv_B_R)
        loss_B_R = jnp.where(dual_B_R, -dual_clip_c * adv_B_R, loss_B_R)
    indicators = {
        "ratio": ratio_B_R,
        "clip_low": ((adv_B_R < 0) & (ratio_B_R < 1.0 - eps_low)).astype(jnp.float32),
        "clip_high": ((adv_B_R > 0) & (ratio_B_R > 1.0 + eps_high)).astype(jnp.float32),
        "clip_dual": dual_B_R.astype(jnp.float32),
    }
    return loss_B_R, indicators


def clip(x: Inputs, o: ClipOptions) -> Terms:
    loss_B_R, ind = clipped_surrogate(x.logp_B_R, x.anchor_logp_B_R, x.adv_B_R,
                                      o.clip_eps_low, o.clip_eps_high, o.dual_clip_c)
    return Terms(loss_B_R, {f"clip_frac_{k}": ind[f"clip_{k}"] for k in ("low", "high", "dual")})


SPEC = register(ObjectiveSpec("clip", clip, ClipOptions, level="token",
                              doc="PPO clipped token ratios, clip-higher, dual clip"))
