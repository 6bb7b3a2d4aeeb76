"""Advantage estimators: pure jnp functions of reward arrays.

Indexing: `rewards_P_G[p, g]` is the scalar outcome reward of sample g of prompt p. The
advantage of a sample is broadcast to every token of its response (outcome supervision).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def grpo(rewards_P_G: jax.Array, eps: float = 1e-6, scale_by_std: bool = True) -> jax.Array:
    """Group-relative advantages (GRPO, Shao et al. 2024, arXiv:2402.03300, eq. 3 / sec 4.1.2):

        A[p, g] = (r[p, g] - mean_g r[p, :]) / (std_g r[p, :] + eps)

    `std` is the unbiased sample std (ddof=1), as TRL and verl compute it with `torch.std`.
    A group whose rewards are all equal carries no signal and gets exactly 0 (not NaN: the
    numerator is exactly 0 and the denominator is eps > 0). With `scale_by_std=False` this is
    Dr. GRPO's unscaled variant (Liu et al. 2025, arXiv:2503.20783).
    """
    assert rewards_P_G.ndim == 2, f"expected [P, G], got {rewards_P_G.shape}"
    assert rewards_P_G.shape[1] >= 2, "a group needs at least 2 samples"
    r = rewards_P_G.astype(jnp.float32)
    centred_P_G = r - jnp.mean(r, axis=1, keepdims=True)
    if not scale_by_std:
        return centred_P_G
    std_P_1 = jnp.std(r, axis=1, keepdims=True, ddof=1)
    return centred_P_G / (std_P_1 + eps)
