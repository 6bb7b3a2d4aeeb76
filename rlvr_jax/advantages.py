"""Advantage estimators: pure jnp functions of reward arrays.

Indexing: `rewards_P_G[p, g]` is the scalar outcome reward of sample g of prompt p. The
advantage of a sample is broadcast to every token of its response (outcome supervision).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def group_centred(rewards_P_G: jax.Array) -> jax.Array:
    """r[p, g] - mean_g r[p, :] in float32, exactly 0 on a group whose rewards are all equal.

    Why the explicit case: the float32 mean of G equal values that are not exactly
    representable (8/9, 3.7) can differ from them by an ulp, and dividing that residue by a
    std of ~1e-8 (+ eps) gave whole constant groups advantages of -0.23 or +0.54."""
    r = rewards_P_G.astype(jnp.float32)
    constant_P_1 = jnp.max(r, axis=1, keepdims=True) == jnp.min(r, axis=1, keepdims=True)
    return jnp.where(constant_P_1, 0.0, r - jnp.mean(r, axis=1, keepdims=True))


def grpo(rewards_P_G: jax.Array, eps: float = 1e-6, scale_by_std: bool = True) -> jax.Array:
    """Group-relative advantages (GRPO, Shao et al. 2024, arXiv:2402.03300, eq. 3 / sec 4.1.2):

        A[p, g] = (r[p, g] - mean_g r[p, :]) / (std_g r[p, :] + eps)

    `std` is the unbiased sample std (ddof=1), as TRL and verl compute it with `torch.std`.
    A group whose rewards are all equal carries no signal and gets exactly 0, whatever the
    reward value and group size (`group_centred`; not NaN: the denominator is >= eps > 0). With `scale_by_std=False` this is
    Dr. GRPO's unscaled variant (Liu et al. 2025, arXiv:2503.20783).
    """
    assert rewards_P_G.ndim == 2, f"expected [P, G], got {rewards_P_G.shape}"
    assert rewards_P_G.shape[1] >= 2, "a group needs at least 2 samples"
    r = rewards_P_G.astype(jnp.float32)
    centred_P_G = group_centred(r)
    if not scale_by_std:
        return centred_P_G
    std_P_1 = jnp.std(r, axis=1, keepdims=True, ddof=1)
    return centred_P_G / (std_P_1 + eps)


def drgrpo(rewards_P_G: jax.Array) -> jax.Array:
    """Dr. GRPO (Liu et al. 2025, arXiv:2503.20783, sec. 3.2): A = r - mean_g r, no std
    division, which otherwise up-weights groups that are nearly all right or all wrong."""
    return grpo(rewards_P_G, scale_by_std=False)


def rloo(rewards_P_G: jax.Array) -> jax.Array:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024, arXiv:2402.14740):

        A[p, g] = r[p, g] - mean_{j != g} r[p, j] = G / (G - 1) * (r[p, g] - mean_g r[p, :])

    The baseline excludes the sample itself, so the estimator stays unbiased."""
    assert rewards_P_G.ndim == 2 and rewards_P_G.shape[1] >= 2, rewards_P_G.shape
    g = rewards_P_G.shape[1]
    # The right-hand form: (sum - r) / (G - 1) leaves rounding residue (~3e-8) on a constant
    # group, where the advantage must be exactly 0.
    return drgrpo(rewards_P_G) * (g / (g - 1))


def maxrl(rewards_P_G: jax.Array, eps: float = 1e-6) -> jax.Array:
    """MaxRL (Tajwar et al. 2026, arXiv:2602.02710, "Maximum Likelihood Reinforcement
    Learning"): the group mean divides instead of the std,

        A[p, g] = (r[p, g] - mean_g r[p, :]) / (mean_g r[p, :] + eps)

    With 0/1 rewards and K of G samples right, sum_g A[p, g] grad log pi(y_g) / G =
    (1/K) sum_{right} grad log pi - (1/G) sum_g grad log pi: an unbiased estimate of
    grad log p_theta(x) truncated at G samples (RL's objective is E p_theta(x), maximum
    likelihood's E log p_theta(x), whose gradient weighs a prompt by 1 / p_theta(x)): a hard
    prompt's rare success counts G / K times. Defined for rewards >= 0 (a pass rate; the
    config refuses reward schemes with negative rewards); a group with no success, or all
    equal, gets exactly 0."""
    assert rewards_P_G.ndim == 2 and rewards_P_G.shape[1] >= 2, rewards_P_G.shape
    r = rewards_P_G.astype(jnp.float32)
    return group_centred(r) / (jnp.maximum(jnp.mean(r, axis=1, keepdims=True), 0.0) + eps)


def gdpo(components_P_G_C: jax.Array, weights_C, eps: float = 1e-6) -> jax.Array:
    """GDPO (Group reward-Decoupled normalization Policy Optimization, arXiv:2601.05242):
    with several rewards, GRPO on their sum lets the widest one drown the others (and
    distinct combinations collapse onto one advantage); GDPO normalises each component
    within its group first, then sums and rescales over the batch:

        A_c[p, g] = GRPO(r_c)[p, g]            (each component c, its own group mean / std)
        S[p, g]   = sum_c w_c A_c[p, g]
        A[p, g]   = S[p, g] / (std_{p,g} S + eps)

    Each group's A_c sums to 0, so the batch mean of S is 0 and is not subtracted (its
    rounding residue would move constant groups off 0). A group constant in every weighted
    component gets exactly 0; one component constant within a group adds nothing to it."""
    assert components_P_G_C.ndim == 3, components_P_G_C.shape
    c = components_P_G_C.astype(jnp.float32)
    s_P_G = jnp.zeros(c.shape[:2], jnp.float32)
    for i, w in enumerate(weights_C):
        if w != 0.0:
            s_P_G = s_P_G + w * grpo(c[:, :, i], eps)
    return s_P_G / (jnp.std(s_P_G) + eps)


def batch_std(rewards_P_G: jax.Array, eps: float = 1e-6) -> jax.Array:
    """Group-mean baseline, scaled by the std of the whole batch instead of each group's:

        A[p, g] = (r[p, g] - mean_g r[p, :]) / (std_{p,g} r + eps)

    (the "scale by batch std" choice of Liu et al. 2025 / REINFORCE++-baseline)."""
    assert rewards_P_G.ndim == 2, rewards_P_G.shape
    r = rewards_P_G.astype(jnp.float32)
    return group_centred(r) / (jnp.std(r) + eps)


def reinforce_pp(rewards_P_G: jax.Array, eps: float = 1e-6) -> jax.Array:
    """REINFORCE++ (Hu 2025, arXiv:2501.03262): no per-prompt baseline; the rewards of the whole
    batch are whitened, A = (r - mean_{p,g} r) / (std_{p,g} r + eps)."""
    assert rewards_P_G.ndim == 2, rewards_P_G.shape
    r = rewards_P_G.astype(jnp.float32)
    return (r - jnp.mean(r)) / (jnp.std(r) + eps)


def reinforce_pp_baseline(rewards_P_G: jax.Array, eps: float = 1e-6) -> jax.Array:
    """REINFORCE++-baseline (Hu 2025, arXiv:2501.03262 v2): subtract the group mean, then
    whiten the centred values over the whole batch:

        c[p, g] = r[p, g] - mean_g r[p, :],   A = (c - mean_{p,g} c) / (std_{p,g} c + eps)

    Every group's c sums to 0, so mean_{p,g} c is exactly 0 and is not subtracted: computed, its
    rounding residue would move constant groups off 0 (they must carry no signal)."""
    assert rewards_P_G.ndim == 2, rewards_P_G.shape
    centred = group_centred(rewards_P_G)
    return centred / (jnp.std(centred) + eps)


def gae(rewards_B_R: jax.Array, values_B_R: jax.Array, mask_B_R: jax.Array, gamma: float,
        lam: float) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over the policy's tokens (Schulman et al. 2016,
    arXiv:1506.02438, eq. 16):

        delta_t = r_t + gamma * V_{t'} - V_t        (t' the next valid token; V after the
        A_t     = delta_t + gamma * lam * A_{t'}     last valid token is 0)
        R_t     = A_t + V_t                          (the value target)

    The time axis is the valid tokens: in a multi-turn episode the tokens between two policy
    turns (an environment's observation, mask 0) are no actions, so they neither take an
    advantage nor cut the recursion. With contiguous masks t' = t + 1. `rewards_B_R` is per
    token (the verifiable reward on the last valid token, a per-token KL penalty on every
    one). Masked positions get A = R = 0. Returns (A, R)."""
    assert rewards_B_R.shape == values_B_R.shape == mask_B_R.shape and rewards_B_R.ndim == 2
    m = mask_B_R.astype(jnp.float32)
    r, v = rewards_B_R.astype(jnp.float32) * m, values_B_R.astype(jnp.float32) * m

    def back(carry, x):
        next_v_B, next_adv_B = carry
        r_B, v_B, m_B = x
        delta_B = r_B + gamma * next_v_B - v_B
        adv_B = (delta_B + gamma * lam * next_adv_B) * m_B
        keep = m_B > 0  # a masked position passes its successor's value and advantage on
        return (jnp.where(keep, v_B, next_v_B), jnp.where(keep, adv_B, next_adv_B)), adv_B

    zeros_B = jnp.zeros_like(r[:, 0])
    _, adv_R_B = jax.lax.scan(back, (zeros_B, zeros_B), (r.T, v.T, m.T), reverse=True)
    adv_B_R = adv_R_B.T * m
    return adv_B_R, (adv_B_R + v) * m


def last_valid(mask_B_R: jax.Array) -> jax.Array:
    """bool [B, R]: each row's last valid position (none in an empty row); with gaps (a
    multi-turn episode's observations) the last of the policy's tokens."""
    m = mask_B_R > 0
    r = m.shape[1]
    last_B = r - 1 - jnp.argmax(m[:, ::-1], axis=1)
    return (jnp.arange(r)[None, :] == last_B[:, None]) & jnp.any(m, axis=1, keepdims=True)


def whiten(x_B_R: jax.Array, mask_B_R: jax.Array, shift_mean: bool = True,
           eps: float = 1e-8) -> jax.Array:
    """(x - mean) / std over the valid tokens of the batch (PPO's advantage normalisation);
    masked positions come out 0. `shift_mean=False` only rescales."""
    m = mask_B_R.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(m), 1.0)
    mean = jnp.sum(x_B_R * m) / n
    var = jnp.sum(jnp.square(x_B_R - mean) * m) / n
    out = (x_B_R - mean) if shift_mean else x_B_R
    return out * jax.lax.rsqrt(var + eps) * m


def token_rewards(outcome_B: jax.Array, mask_B_R: jax.Array, kl_B_R: jax.Array | None = None,
                  kl_coef: jax.Array | float = 0.0,
                  turn_rewards_B_R: jax.Array | None = None) -> jax.Array:
    """Per-token rewards for GAE: the verifiable outcome on the last valid token, an
    environment's per-turn rewards u_t at the tokens that ended their turns (multi-turn
    episodes; zero elsewhere), minus a per-token KL penalty to the reference policy (Ziegler
    et al. 2019, arXiv:1909.08593, eq. 2; Ouyang et al. 2022):

        r_t = 1[t = last] * R + u_t - beta * KL_t        (t over the policy's tokens)

    `mask_B_R` is the loss mask (the policy's tokens): "last" is the last of them, and a
    reward position outside it is dropped."""
    m = mask_B_R.astype(jnp.float32)
    r_B_R = jnp.where(last_valid(m), outcome_B[:, None].astype(jnp.float32), 0.0)
    if turn_rewards_B_R is not None:
        r_B_R = r_B_R + turn_rewards_B_R.astype(jnp.float32)
    if kl_B_R is not None:
        r_B_R = r_B_R - kl_coef * kl_B_R
    return r_B_R * m


def adaptive_kl_coef(coef: float, observed_kl: float, target_kl: float, horizon: int,
                     n_steps: int = 1) -> float:
    """Adaptive KL controller (Ziegler et al. 2019, arXiv:1909.08593, sec. 2.2), a pure
    `f(state, x) -> state` on the host:

        e = clip(KL / KL_target - 1, -0.2, 0.2);   beta <- beta * (1 + e * n_steps / horizon)

    beta grows while the policy drifts past the target and shrinks below it."""
    err = min(max(observed_kl / target_kl - 1.0, -0.2), 0.2)
    return coef * (1.0 + err * n_steps / horizon)


def overlong_penalty(lengths_B: jax.Array, max_len: int, buffer_len: int,
                     factor: float = 1.0) -> jax.Array:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476, eq. 13), added to the
    outcome reward, with L_max = `max_len` (the response budget) and L_cache = `buffer_len`:

        0                                  |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache  L_max - L_cache < |y| <= L_max
        -1                                 |y| > L_max  (a truncated response counts here)

    times `factor`. `lengths_B` counts response tokens, EOS included; pass L_max + 1 for a
    response cut at the budget without EOS."""
    lengths_B = jnp.asarray(lengths_B, jnp.float32)
    start = max_len - buffer_len
    soft = (start - lengths_B) / buffer_len
    pen = jnp.where(lengths_B <= start, 0.0, jnp.where(lengths_B <= max_len, soft, -1.0))
    return factor * pen


ESTIMATORS = ("grpo", "drgrpo", "rloo", "batch_std", "reinforce_pp", "reinforce_pp_baseline",
              "maxrl", "gdpo")


def from_rewards(rewards_P_G: jax.Array, estimator: str, eps: float = 1e-6,
                 components_P_G_C: jax.Array | None = None, weights_C=()) -> jax.Array:
    """Outcome advantages by name (the config's `algo.adv_estimator`); gdpo reads the reward
    components and their weights instead of their sum."""
    if estimator == "gdpo":
        return gdpo(components_P_G_C, weights_C, eps)
    if estimator == "grpo":
        return grpo(rewards_P_G, eps)
    if estimator == "drgrpo":
        return drgrpo(rewards_P_G)
    if estimator == "rloo":
        return rloo(rewards_P_G)
    if estimator == "batch_std":
        return batch_std(rewards_P_G, eps)
    if estimator == "reinforce_pp":
        return reinforce_pp(rewards_P_G, eps)
    if estimator == "reinforce_pp_baseline":
        return reinforce_pp_baseline(rewards_P_G, eps)
    if estimator == "maxrl":
        return maxrl(rewards_P_G, eps)
    raise ValueError(f"unknown advantage estimator {estimator!r} (known: {', '.join(ESTIMATORS)})")
