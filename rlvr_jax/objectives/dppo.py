"""DPPO (Divergence PPO; "Rethinking the Trust Region in LLM Reinforcement Learning",
arXiv:2602.04879): PPO's ratio clip is a poor trust region for a vocabulary of 150k tokens (a
rare token's ratio swings wildly while its probability barely moves; a likely token's
probability can move a lot at a modest ratio). DPPO bounds the divergence of each token's own
Bernoulli instead, and masks the tokens that left the region in the direction their advantage
pushes. Per token, with p = pi(a_t), q = pi_anchor(a_t), r = p / q, to minimise:

    L = -A * sg(min(r, C)) * logp * valid

    dppo_tv   (binary total variation)  valid = p - q <= delta_high     where A > 0
                                                p - q >= -delta_low     where A <= 0
    dppo_kl   (binary KL)  D = q log(q / p) + (1 - q) log((1 - q) / (1 - p))
                                        valid = D <= delta_high or p <= q   where A > 0
                                                D <= delta_low  or p >= q   where A <= 0

`valid` is detached. The gradient is -A min(r, C) grad(logp) on the valid tokens, 0 on the
others: on-policy (r = 1, p = q: every token valid) it is REINFORCE's, the clipped
surrogate's there too. The weight's cap C (`ratio_cap`) only guards against a runaway ratio.
The thresholds default to 0.15 (TV) and 0.05 (KL): starting points to tune, not the paper's
prescription for every model. Fractions: `dppo_masked_frac` (the tokens outside the region),
`ratio_capped_frac`."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr_jax.config.choices import _check
from rlvr_jax.objectives.registry import Inputs, ObjectiveSpec, Terms, register


@dataclass(frozen=True)
class DPPOTVOptions:
    delta_low: float = 0.15  # how far p may fall below q on a token pushed down
    delta_high: float = 0.15  # how far p may rise above q on a token pushed up
    ratio_cap: float = 20.0

    def check(self, key: str) -> None:
        _check(0 < self.delta_low <= 1 and 0 < self.delta_high <= 1,
               f"{key}.options.delta_low", "the TV bounds must be in (0, 1]")
        _check(self.ratio_cap >= 1.0, f"{key}.options.ratio_cap", "must be >= 1")


@dataclass(frozen=True)
class DPPOKLOptions:
    delta_low: float = 0.05
    delta_high: float = 0.05
    ratio_cap: float = 20.0

    def check(self, key: str) -> None:
        _check(self.delta_low > 0 and self.delta_high > 0, f"{key}.options.delta_low",
               "the KL bounds must be > 0")
        _check(self.ratio_cap >= 1.0, f"{key}.options.ratio_cap", "must be >= 1")


def _masked_pg(x: Inputs, valid_B_R, cap: float) -> Terms:
    import jax
    import jax.numpy as jnp

    ratio_B_R = jnp.exp(jnp.clip(x.logp_B_R - x.anchor_logp_B_R, -20.0, 20.0))
    valid_B_R = jax.lax.stop_gradient(valid_B_R.astype(jnp.float32))
    weight_B_R = jax.lax.stop_gradient(jnp.minimum(ratio_B_R, cap))
    return Terms(-x.adv_B_R * weight_B_R * x.logp_B_R * valid_B_R, {
        "dppo_masked_frac": 1.0 - valid_B_R,
        "ratio_capped_frac": (ratio_B_R > cap).astype(jnp.float32) * valid_B_R})


def dppo_tv(x: Inputs, o: DPPOTVOptions) -> Terms:
    import jax.numpy as jnp

    diff_B_R = jnp.exp(x.logp_B_R) - jnp.exp(x.anchor_logp_B_R)
    valid_B_R = jnp.where(x.adv_B_R > 0, diff_B_R <= o.delta_high, diff_B_R >= -o.delta_low)
    return _masked_pg(x, valid_B_R, o.ratio_cap)


def binary_kl(logq_B_R, logp_B_R):
    """KL(Bernoulli(q) || Bernoulli(p)) from log-probs; 1 - p and 1 - q as -expm1(log), exact
    near probability 1 where 1 - exp(log) is all rounding, floored at 1e-12."""
    import jax.numpy as jnp

    one_minus = lambda lp: jnp.maximum(-jnp.expm1(lp), 1e-12)
    return (jnp.exp(logq_B_R) * (logq_B_R - logp_B_R) + one_minus(logq_B_R)
            * (jnp.log(one_minus(logq_B_R)) - jnp.log(one_minus(logp_B_R))))


def dppo_kl(x: Inputs, o: DPPOKLOptions) -> Terms:
    import jax.numpy as jnp

    d_B_R = binary_kl(x.anchor_logp_B_R, x.logp_B_R)
    up_B_R = x.logp_B_R > x.anchor_logp_B_R
    valid_B_R = jnp.where(x.adv_B_R > 0, (d_B_R <= o.delta_high) | ~up_B_R,
                          (d_B_R <= o.delta_low) | (x.logp_B_R >= x.anchor_logp_B_R))
    return _masked_pg(x, valid_B_R, o.ratio_cap)


SPEC_TV = register(ObjectiveSpec("dppo_tv", dppo_tv, DPPOTVOptions, level="token",
                                 doc="policy gradient masked outside a total-variation trust "
                                     "region on each token's probability (DPPO)"))
SPEC_KL = register(ObjectiveSpec("dppo_kl", dppo_kl, DPPOKLOptions, level="token",
                                 doc="policy gradient masked outside a binary-KL trust region "
                                     "on each token's probability (DPPO)"))
