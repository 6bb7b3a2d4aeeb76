"""Step-level groups for multi-turn episodes: GiGPO (Feng et al. 2025, arXiv:2505.10978,
"Group-in-Group Policy Optimization for LLM Agent Training"), host numpy.

A group's G episodes start from one prompt; where two of them reach the same state again
(the same history of tokens: the policy's turns and the environment's observations, so far),
the turns they take from there form a step-level group, and comparing what followed gives a
turn its own credit, beside the episode's:

    turns         turn k of an episode: its k-th run of policy tokens (loss mask 1)
    state(k)      the episode's tokens before turn k (the prompt is the group's)
    return R_k    sum_{j >= k} gamma^(j - k) r_j, r_j the turn's per-turn reward (at its
                  last token), the outcome added to the last turn
    step group    the turns (k, episode) of one group sharing state(k)
    A_step        (R_k - mean R) / (std R + eps) within the step group (ddof=1; 0 for a
                  group of one or of equal returns); without `scale_by_std`, R_k - mean R
    A[t]          A_episode + weight * A_step(turn of t), on the policy's tokens

The first turn's state is the prompt, shared by all G episodes: its step group is the
episode group (as in the paper). A sample out of the loss (a sandbox error, a masked
truncation) has no policy tokens: it takes part in no step group. Reported: the share of
later turns (k >= 1) that found a group of at least 2 (`gigpo/later_turns_grouped`), the
step groups' mean size, and the turns counted."""

from __future__ import annotations

import numpy as np


def turn_spans(loss_mask_R: np.ndarray) -> list[tuple[int, int]]:
    """[(start, end)) of each maximal run of policy tokens, in order."""
    on = np.concatenate([[0], (np.asarray(loss_mask_R) > 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(on))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def step_advantages(tokens_P_G_R: np.ndarray, loss_mask_P_G_R: np.ndarray,
                    rewards_P_G: np.ndarray, turn_rewards_P_G_R: np.ndarray, *, gamma: float,
                    eps: float = 1e-6, scale_by_std: bool = True) -> tuple[np.ndarray, dict]:
    """(A_step per token [P, G, R] float32, metrics), as the module says."""
    p_n, g_n, r_n = tokens_P_G_R.shape
    adv_P_G_R = np.zeros((p_n, g_n, r_n), np.float32)
    later = later_grouped = 0
    sizes: list[int] = []
    for p in range(p_n):
        groups: dict[tuple, list[tuple[int, int, int, float]]] = {}
        for g in range(g_n):
            spans = turn_spans(loss_mask_P_G_R[p, g])
            if not spans:
                continue
            r_turn = [float(turn_rewards_P_G_R[p, g, s:e].sum()) for s, e in spans]
            r_turn[-1] += float(rewards_P_G[p, g])
            ret = 0.0
            returns = [0.0] * len(spans)
            for k in range(len(spans) - 1, -1, -1):
                ret = r_turn[k] + gamma * ret
                returns[k] = ret
            for k, (s, e) in enumerate(spans):
                state = (k, s, tokens_P_G_R[p, g, :s].tobytes())
                groups.setdefault(state, []).append((g, s, e, returns[k]))
        for (k, _, _), members in groups.items():
            sizes.append(len(members))
            if k >= 1:
                later += len(members)
                later_grouped += len(members) * (len(members) >= 2)
            if len(members) < 2:
                continue
            r = np.array([m[3] for m in members], np.float64)
            if r.max() == r.min():
                continue
            a = r - r.mean()
            if scale_by_std:
                a = a / (r.std(ddof=1) + eps)
            for (g, s, e, _), a_m in zip(members, a):
                adv_P_G_R[p, g, s:e] = a_m
    metrics = {"gigpo/later_turns_grouped": later_grouped / later if later else 0.0,
               "gigpo/step_group_size_mean": float(np.mean(sizes)) if sizes else 0.0,
               "gigpo/later_turns": float(later)}
    return adv_P_G_R * (loss_mask_P_G_R > 0), metrics
