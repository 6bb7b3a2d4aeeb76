"""The policy objectives, a table registered as tasks are: one module per objective, each a
pure function of log-probs, the anchor log-probs its ratio is taken to, advantages and the
loss mask that returns per-token (or per-sequence) terms and the fractions it reports, with
its options' schema and checks beside it (`registry.py`). The aggregation, the KL and entropy
terms, and the off-policy importance weights stay shared around it
(`losses.policy_gradient_loss`). Objectives outside the repository register through the
`rlvr_jax.objectives` entry point group; conf/README.md has a worked example.

    clip   PPO's clipped token ratios, dual clip, clip-higher (the default)
    gspo   one clipped ratio per sequence (GSPO)
    cispo  a clipped, detached importance weight times A log pi (MiniMax-M1's CISPO)
    sapo   a smooth sigmoid gate on the token ratio, its temperature by the sign of A (SAPO)
    gmpo   the geometric mean of a sequence's log-clipped token ratios (GMPO)
    kl_cov a KL penalty on the tokens of highest log-prob x advantage covariance (KL-Cov)
    clip_cov  PPO's clip, the gradient stopped on a random few high-covariance tokens
    dppo_tv, dppo_kl  the policy gradient masked outside a per-token trust region (DPPO)
"""

from rlvr_jax.objectives.registry import (Inputs, ObjectiveSpec, Terms, get, options_for,
                                          register, specs)

__all__ = ["Inputs", "ObjectiveSpec", "Terms", "get", "options_for", "register", "specs"]
