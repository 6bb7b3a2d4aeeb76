"""CISPO (MiniMax-M1, arXiv:2506.13585, eq. 4-5): clip the importance weight, not the
update, and stop its gradient, so every token keeps a gradient (PPO's clip zeroes the
gradient of a token once its ratio leaves the trust region; the rare "However" / "Wait"
tokens of long reasoning are the first to go). Per token, to minimise:

    r   = exp(logp - anchor_logp)
    L   = -sg(clip(r, 1 - eps_low_is, 1 + eps_high_is)) * A * logp

The paper sets no lower bound (eps_low_is large: 1 here, a weight >= 0) and tunes
eps_high_is. On-policy (r = 1) its gradient is REINFORCE's, -A grad(logp), which is the
clipped surrogate's there too. Fractions: `clip_frac_low` / `clip_frac_high`, the tokens whose
weight was clipped (their gradient is scaled, never dropped)."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr_jax.config.choices import _check
from rlvr_jax.objectives.registry import Inputs, ObjectiveSpec, Terms, register


@dataclass(frozen=True)
class CISPOOptions:
    eps_low_is: float = 1.0  # the weight's lower bound 1 - eps_low_is (1: none, weight >= 0)
    eps_high_is: float = 0.28  # its upper bound 1 + eps_high_is

    def check(self, key: str) -> None:
        _check(0.0 <= self.eps_low_is <= 1.0, f"{key}.options.eps_low_is", "must be in [0, 1]")
        _check(self.eps_high_is >= 0.0, f"{key}.options.eps_high_is", "must be >= 0")


def cispo(x: Inputs, o: CISPOOptions) -> Terms:
    import jax
    import jax.numpy as jnp  # here: a config is checked without JAX

    ratio_B_R = jnp.exp(x.logp_B_R - x.anchor_logp_B_R)
    weight_B_R = jax.lax.stop_gradient(
        jnp.clip(ratio_B_R, 1.0 - o.eps_low_is, 1.0 + o.eps_high_is))
    return Terms(-weight_B_R * x.adv_B_R * x.logp_B_R, {
        "clip_frac_low": (ratio_B_R < 1.0 - o.eps_low_is).astype(jnp.float32),
        "clip_frac_high": (ratio_B_R > 1.0 + o.eps_high_is).astype(jnp.float32)})


SPEC = register(ObjectiveSpec("cispo", cispo, CISPOOptions, level="token",
                              doc="clipped, detached importance weight times A log pi: every "
                                  "token keeps a gradient"))
