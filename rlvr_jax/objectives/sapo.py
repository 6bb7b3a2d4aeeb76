"""SAPO (Gao et al. 2025, arXiv:2511.20347): a smooth, temperature-controlled gate in place of
the hard clip, per token, to minimise:

    r     = exp(logp - anchor_logp)
    tau   = tau_pos if A > 0 else tau_neg
    f(r)  = (4 / tau) * sigmoid(tau * (r - 1))
    L     = -A * f(r)

df/dr = 4 s (1 - s) with s = sigmoid(tau (r - 1)): 1 at r = 1 (on-policy its gradient is the
policy gradient's, as the clipped surrogate's), decaying smoothly as r leaves 1, faster for
the larger tau_neg (negative advantages are attenuated sooner). Reported: `gate_weight`, the
mean of 4 s (1 - s), the share of each token's gradient the gate keeps."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr_jax.config.choices import _check
from rlvr_jax.objectives.registry import Inputs, ObjectiveSpec, Terms, register


@dataclass(frozen=True)
class SAPOOptions:
    tau_pos: float = 1.0
    tau_neg: float = 1.05

    def check(self, key: str) -> None:
        _check(self.tau_pos > 0 and self.tau_neg > 0, f"{key}.options.tau_pos",
               "tau_pos and tau_neg must be > 0")


def sapo(x: Inputs, o: SAPOOptions) -> Terms:
    import jax
    import jax.numpy as jnp  # here: a config is checked without JAX

    ratio_B_R = jnp.exp(x.logp_B_R - x.anchor_logp_B_R)
    tau_B_R = jnp.where(x.adv_B_R > 0, o.tau_pos, o.tau_neg)
    s_B_R = jax.nn.sigmoid(tau_B_R * (ratio_B_R - 1.0))
    return Terms(-x.adv_B_R * (4.0 / tau_B_R) * s_B_R,
                 {"gate_weight": 4.0 * s_B_R * (1.0 - s_B_R)})


SPEC = register(ObjectiveSpec("sapo", sapo, SAPOOptions, level="token",
                              doc="a smooth sigmoid gate on the token ratio, by sign of A"))
