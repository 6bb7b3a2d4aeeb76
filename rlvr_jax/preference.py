"""Losses of learning from preference pairs (chosen over rejected), as pure functions of
per-pair arrays: the Bradley-Terry reward-model loss and DPO.

Shape letters (types.py): B pairs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def bradley_terry_loss(r_chosen_B: jax.Array, r_rejected_B: jax.Array,
                       margin_B: jax.Array | float = 0.0, label_smoothing: float = 0.0
                       ) -> tuple[jax.Array, dict]:
    """Reward-model loss under the Bradley-Terry model (Bradley & Terry 1952; Ouyang et al.
    2022, arXiv:2203.02155, eq. 1), P(chosen > rejected) = sigmoid(r_c - r_r):

        d = r_c - r_r - m
        loss = -mean[(1 - eps) log sigmoid(d) + eps log sigmoid(-d)]

    `margin_B` m: a required score gap per pair (Llama 2, arXiv:2307.09288, sec. 3.2.2);
    `label_smoothing` eps: each label taken as flipped with probability eps (robust to label
    noise). Metrics: pairwise accuracy (r_c > r_r; a tie counts half) and the mean gap."""
    d = r_chosen_B - r_rejected_B - margin_B
    eps = label_smoothing
    loss = -jnp.mean((1.0 - eps) * jax.nn.log_sigmoid(d) + eps * jax.nn.log_sigmoid(-d))
    gap = r_chosen_B - r_rejected_B
    accuracy = jnp.mean(jnp.where(gap > 0, 1.0, jnp.where(gap == 0, 0.5, 0.0)))
    return loss, {"loss": loss, "accuracy": accuracy, "gap": jnp.mean(gap)}


def dpo_loss(logp_chosen_B: jax.Array, logp_rejected_B: jax.Array,
             ref_logp_chosen_B: jax.Array, ref_logp_rejected_B: jax.Array, beta: float,
             label_smoothing: float = 0.0) -> tuple[jax.Array, dict]:
    """Direct Preference Optimization (Rafailov et al. 2023, arXiv:2305.18290, eq. 7) on
    sequence log-probs (sums over each response's tokens):

        h = beta [(log pi(y_c) - log pi_ref(y_c)) - (log pi(y_r) - log pi_ref(y_r))]
        loss = -mean[(1 - eps) log sigmoid(h) + eps log sigmoid(-h)]

    eps > 0 is conservative DPO (labels flipped with probability eps; Mitchell 2023). Metrics:
    the implicit rewards beta (log pi - log pi_ref) of chosen and rejected, their margin, and
    the pairwise accuracy of those rewards."""
    reward_c = beta * (logp_chosen_B - ref_logp_chosen_B)
    reward_r = beta * (logp_rejected_B - ref_logp_rejected_B)
    h = reward_c - reward_r
    eps = label_smoothing
    loss = -jnp.mean((1.0 - eps) * jax.nn.log_sigmoid(h) + eps * jax.nn.log_sigmoid(-h))
    return loss, {"loss": loss, "reward_chosen": jnp.mean(reward_c),
                  "reward_rejected": jnp.mean(reward_r), "reward_margin": jnp.mean(h),
                  "accuracy": jnp.mean((h > 0).astype(jnp.float32))}
