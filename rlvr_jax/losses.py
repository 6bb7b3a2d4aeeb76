"""Policy-gradient losses: pure jnp functions returning (loss, metrics).

Indexing: B sequences, R response tokens, V vocabulary. `mask_B_R` is 1 on tokens that enter the
loss. Log-probs are natural logs of the sampled tokens.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from rlvr_jax import objectives
from rlvr_jax.objectives.clip import clipped_surrogate  # noqa: F401 (re-exported)
from rlvr_jax.objectives.gspo import gspo_surrogate  # noqa: F401


def token_logp_and_entropy(logits_B_R_V: jax.Array, targets_B_R: jax.Array,
                           temperature: float = 1.0) -> tuple[jax.Array, jax.Array]:
    """log pi(target) and the entropy of pi = softmax(logits / temperature), per position."""
    assert logits_B_R_V.ndim == 3 and targets_B_R.ndim == 2
    logp_B_R_V = jax.nn.log_softmax(logits_B_R_V.astype(jnp.float32) / temperature, axis=-1)
    logp_B_R = jnp.take_along_axis(logp_B_R_V, targets_B_R[..., None], axis=-1)[..., 0]
    entropy_B_R = -jnp.sum(jnp.exp(logp_B_R_V) * logp_B_R_V, axis=-1)
    return logp_B_R, entropy_B_R


def chunked_logp_and_entropy(hidden_B_R_D: jax.Array, head: Callable[[jax.Array], jax.Array],
                             targets_B_R: jax.Array, temperature: float,
                             chunk: int) -> tuple[jax.Array, jax.Array]:
    """`token_logp_and_entropy(head(hidden), targets)` computed `chunk` tokens at a time: the
    head's float32 logits [B, chunk, V], their log-softmax and gather exist for one chunk at a
    time, and the backward pass recomputes them per chunk (`jax.checkpoint`) instead of storing
    [B, R, V] (at a 152k vocabulary, 64 x 512 tokens of float32 logits are 20 GB). `head`
    maps hidden states [B, C, D] to logits [B, C, V]. chunk <= 0 or >= R: one chunk. The same
    values and gradients as the unchunked path, up to float32 rounding (tested)."""
    b, r, _ = hidden_B_R_D.shape
    if chunk <= 0 or chunk >= r:
        return token_logp_and_entropy(head(hidden_B_R_D), targets_B_R, temperature)
    n = -(-r // chunk)
    pad = n * chunk - r  # the padded positions' values are computed and dropped
    h_N_B_C_D = jnp.pad(hidden_B_R_D, ((0, 0), (0, pad), (0, 0))).reshape(
        b, n, chunk, -1).swapaxes(0, 1)
    t_N_B_C = jnp.pad(targets_B_R, ((0, 0), (0, pad))).reshape(b, n, chunk).swapaxes(0, 1)

    @jax.checkpoint
    def one(h_B_C_D, t_B_C):
        return token_logp_and_entropy(head(h_B_C_D), t_B_C, temperature)

    logp_N_B_C, ent_N_B_C = jax.lax.map(lambda xs: one(*xs), (h_N_B_C_D, t_N_B_C))
    unchunk = lambda x: x.swapaxes(0, 1).reshape(b, n * chunk)[:, :r]
    return unchunk(logp_N_B_C), unchunk(ent_N_B_C)


def masked_mean(x_B_R: jax.Array, mask_B_R: jax.Array) -> jax.Array:
    """Token-level mean over valid tokens of the whole batch (DAPO's aggregation,
    arXiv:2503.14476 eq. 12): every token weighs the same, whatever its sequence's length.
    An all-zero mask gives 0, not NaN."""
    return jnp.sum(x_B_R * mask_B_R) / jnp.maximum(jnp.sum(mask_B_R), 1.0)


def kl_estimate(logp_B_R: jax.Array, ref_logp_B_R: jax.Array, kind: str,
                clamp: float = 20.0) -> jax.Array:
    """Per-token estimators of KL(pi || pi_ref) from tokens sampled from pi (Schulman 2020,
    http://joschu.net/blog/kl-approx.html), with log r = log pi_ref - log pi:

        k1 = -log r                 unbiased, high variance, can be negative
        k2 = (log r)^2 / 2          biased (E[k2] = KL only to second order), low variance
        k3 = r - 1 - log r          unbiased, non-negative (GRPO eq. 4)

    `log r` is clamped to [-clamp, clamp] so one drifted token cannot overflow exp()."""
    log_r = jnp.clip(ref_logp_B_R - logp_B_R, -clamp, clamp)
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r * log_r
    if kind == "k3":
        return jnp.exp(log_r) - log_r - 1.0
    raise ValueError(f"unknown KL estimator {kind!r} (known: k1, k2, k3)")


AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                "seq-mean-token-sum-norm")


class Counts(NamedTuple):
    """Denominators of a loss, counted on the whole (mini)batch. A microbatch's loss divides its
    own sums by these, so the microbatch losses (and gradients) add up to the full-batch ones."""

    num_tokens: jax.Array  # valid tokens (at least 1)
    num_seqs: jax.Array  # sequences with at least one valid token (at least 1)


def counts(mask_B_R: jax.Array) -> Counts:
    m = mask_B_R.astype(jnp.float32)
    return Counts(jnp.maximum(jnp.sum(m), 1.0),
                  jnp.maximum(jnp.sum((jnp.sum(m, axis=1) > 0).astype(jnp.float32)), 1.0))


def aggregate(x_B_R: jax.Array, mask_B_R: jax.Array, mode: str, norm_tokens: int = 0,
              total: Counts | None = None) -> jax.Array:
    """Reduce a per-token loss to a scalar. The choice sets how much each token weighs
    (B sequences, n_b valid tokens in sequence b, L = `norm_tokens`):

        token-mean               sum_{b,t} x / sum_b n_b     every token alike (DAPO)
        seq-mean-token-mean      mean_b (sum_t x / n_b)      original GRPO: a token of a long
                                                             sequence weighs less, so long wrong
                                                             answers are penalised less per token
        seq-mean-token-sum       mean_b sum_t x              longer sequences weigh more
        seq-mean-token-sum-norm  sum_{b,t} x / (B * L)       Dr. GRPO (arXiv:2503.20783): a
                                                             constant divisor, no length bias

    Sequences with no valid token count as absent (padding groups, masked truncations). `total`
    replaces the batch's own counts (`counts(mask_B_R)`) by those of a larger batch this one is
    a microbatch of."""
    m = mask_B_R.astype(jnp.float32)
    total = counts(m) if total is None else total
    per_seq_sum_B = jnp.sum(x_B_R * m, axis=1)
    if mode == "token-mean":
        return jnp.sum(per_seq_sum_B) / total.num_tokens
    if mode == "seq-mean-token-mean":
        return jnp.sum(per_seq_sum_B / jnp.maximum(jnp.sum(m, axis=1), 1.0)) / total.num_seqs
    if mode == "seq-mean-token-sum":
        return jnp.sum(per_seq_sum_B) / total.num_seqs
    if mode == "seq-mean-token-sum-norm":
        if norm_tokens <= 0:
            raise ValueError("seq-mean-token-sum-norm needs norm_tokens > 0 (e.g. max_new_tokens)")
        return jnp.sum(per_seq_sum_B) / (total.num_seqs * norm_tokens)
    raise ValueError(f"unknown aggregation {mode!r} (known: {', '.join(AGGREGATIONS)})")


MASKED = ("token_mask", "sequence_mask", "geo_mask")


def behaviour_weights(prox_logp_B_R: jax.Array, behav_logp_B_R: jax.Array, mask_B_R: jax.Array,
                      cap: float, level: str, total: Counts | None = None,
                      bounds: tuple[float, float] = (0.5, 2.0)) -> tuple[jax.Array, dict]:
    """Importance weights from the behaviour policy mu (the sampler, which drew the tokens) to
    the proximal policy (the trainer's params at the start of the update), for the decoupled
    surrogate (Hilton et al. 2021, arXiv:2110.00641, "decoupled PPO"), with rho_t =
    pi_prox(a_t) / mu(a_t) over the loss mask's tokens (0 elsewhere):

      truncated (Espeholt et al. 2018; Yao et al. 2025, "Your efficient RL framework secretly
      brings you off-policy RL training"):
        token           w_t = min(rho_t, C)
        sequence        w_b = min(prod_t rho_t, C), the same for each token of b
      masked, with bounds [lo, hi] (arXiv:2510.18855's IcePop; arXiv:2512.23075):
        token_mask      w_t = rho_t if lo <= rho_t <= hi else 0: the token leaves the loss
        sequence_mask   w_t = rho_t if lo <= prod_t rho_t <= hi else 0: the whole sequence
        geo_mask        w_t = rho_t if lo <= (prod_t rho_t)^(1/n) <= hi else 0: the same by
                        the geometric mean, which does not grow with the length

    A masked token keeps its place in the aggregation's denominators (it weighs 0). No
    gradient flows through w (both policies are fixed for the update). Returns (w_B_R,
    metrics: the weights' token-mean and max, the share of tokens whose weight was capped
    (truncated modes) or masked (masked modes); `total` as in `policy_gradient_loss`)."""
    m = mask_B_R.astype(jnp.float32)
    log_w_B_R = jax.lax.stop_gradient(prox_logp_B_R - behav_logp_B_R) * m
    n = (total or counts(mask_B_R)).num_tokens
    if level in MASKED:
        lo, hi = bounds
        rho_B_R = jnp.exp(log_w_B_R)
        if level == "token_mask":
            test_B_R = log_w_B_R
        else:
            log_seq_B = jnp.sum(log_w_B_R, axis=1, keepdims=True)
            if level == "geo_mask":
                log_seq_B = log_seq_B / jnp.maximum(jnp.sum(m, axis=1, keepdims=True), 1.0)
            test_B_R = jnp.broadcast_to(log_seq_B, m.shape)
        keep_B_R = (test_B_R >= jnp.log(lo)) & (test_B_R <= jnp.log(hi))
        w_B_R = jnp.where(keep_B_R, rho_B_R, 0.0) * m
        return w_B_R, {"is_weight_mean": jnp.sum(w_B_R) / n,
                       "is_weight_max": jnp.max(jnp.where(m > 0, rho_B_R, 0.0)),
                       "is_masked_frac": jnp.sum((~keep_B_R) * m) / n}
    if level == "token":
        raw_B_R = jnp.exp(log_w_B_R)
    elif level == "sequence":
        raw_B_R = jnp.broadcast_to(jnp.exp(jnp.sum(log_w_B_R, axis=1, keepdims=True)),
                                   m.shape)
    else:
        raise ValueError(f"unknown importance level {level!r} (known: token, sequence, "
                         f"{', '.join(MASKED)})")
    w_B_R = jnp.minimum(raw_B_R, cap) * m
    return w_B_R, {"is_weight_mean": jnp.sum(w_B_R) / n,
                   "is_weight_max": jnp.max(jnp.where(m > 0, raw_B_R, 0.0)),
                   "is_capped_frac": jnp.sum((raw_B_R > cap) * m) / n}


def policy_gradient_loss(logp_B_R: jax.Array, old_logp_B_R: jax.Array,
                         ref_logp_B_R: jax.Array | None, advantages_B_R: jax.Array,
                         mask_B_R: jax.Array, entropy_B_R: jax.Array, *, eps_low: float,
                         eps_high: float, kl_coef: float, kl_estimator: str = "k3",
                         loss_agg: str = "token-mean", norm_tokens: int = 0,
                         dual_clip_c: float = 0.0, policy_loss: str = "clip",
                         entropy_coef: float = 0.0,
                         total: Counts | None = None,
                         prox_logp_B_R: jax.Array | None = None,
                         is_weights_B_R: jax.Array | None = None,
                         objective_options: tuple = (),
                         key: jax.Array | None = None) -> tuple[jax.Array, dict]:
    """The policy-gradient objective of the GRPO family (arXiv:2402.03300 eq. 3) and of PPO
    (arXiv:1707.06347), with the field's variants as named options:

        loss = agg_{b,t}( L_clip[b,t] + beta * KL_k[b,t] - c_H * H[b,t] )

    `advantages_B_R` is per token: an outcome advantage broadcast over its response (GRPO
    family) or a GAE advantage (PPO). `policy_loss` names the objective (rlvr_jax/objectives:
    `clip`, token ratios with decoupled clip and dual clip; `gspo`, one clipped ratio per
    sequence; ...), its options from `eps_low`, `eps_high`, `dual_clip_c` and
    `objective_options` ((name, value) pairs); per-token terms are aggregated by `loss_agg`
    (see `aggregate`), per-sequence ones averaged over sequences. The KL term
    (`kl_estimator` k1/k2/k3) and the entropy bonus use the
    same aggregation. `ref_logp_B_R` may be None only when `kl_coef == 0` (the reference forward
    is skipped). `total`: the counts of the full batch when this is a microbatch; every metric
    is then this microbatch's share, so metrics sum over microbatches (except `*_max`: max).

    Decoupled (off-policy) form, with `prox_logp_B_R` (the proximal policy's log-probs) and
    `is_weights_B_R` (`behaviour_weights`): the ratio is taken to the proximal policy and each
    token's surrogate is weighted, L = w * max(-A r_prox, -A clip(r_prox)); without them
    (None) the ratio is to `old_logp_B_R` and nothing is weighted, as before. `key`: for an
    objective that samples (objectives.Inputs.key).
    """
    assert logp_B_R.ndim == 2 and advantages_B_R.shape == logp_B_R.shape
    total = counts(mask_B_R) if total is None else total
    agg = lambda x_B_R: aggregate(x_B_R, mask_B_R, loss_agg, norm_tokens, total)
    tok_mean = lambda x_B_R: aggregate(x_B_R, mask_B_R, "token-mean", total=total)
    seq_mean = lambda x_B: aggregate(jnp.broadcast_to(x_B[:, None], mask_B_R.shape), mask_B_R,
                                     "seq-mean-token-mean", total=total)
    anchor_B_R = old_logp_B_R if prox_logp_B_R is None else prox_logp_B_R
    ratio_B_R = jnp.exp(logp_B_R - anchor_B_R)
    spec = objectives.get(policy_loss)
    shared = {"clip_eps_low": eps_low, "clip_eps_high": eps_high, "dual_clip_c": dual_clip_c}
    terms = spec.fn(objectives.Inputs(logp_B_R, anchor_B_R, advantages_B_R, mask_B_R, key),
                    objectives.options_for(policy_loss, shared, dict(objective_options)))
    if spec.level == "token":
        pg_B_R = terms.loss if is_weights_B_R is None else terms.loss * is_weights_B_R
        pg_loss = agg(pg_B_R)
        clip_metrics = {k: tok_mean(v) for k, v in terms.fractions.items()}
    else:
        if is_weights_B_R is not None:
            raise ValueError(f"objective {policy_loss!r} takes no per-token importance weights")
        pg_loss = seq_mean(terms.loss)
        clip_metrics = {k: seq_mean(v) for k, v in terms.fractions.items()}
    entropy = tok_mean(entropy_B_R)
    metrics = {
        "pg_loss": pg_loss,
        **clip_metrics,
        "ratio_mean": tok_mean(ratio_B_R),
        "ratio_max": jnp.max(jnp.where(mask_B_R > 0, ratio_B_R, 0.0)),
        "entropy": entropy,
        # k1 = old_logp - logp: a sample estimate of KL(old || new), to watch policy drift.
        "approx_kl_old": tok_mean(old_logp_B_R - logp_B_R),
        # |sampler - trainer| log-prob per response token: before any update of the step the
        # params are the sampler's, so this is their numerical mismatch (bf16, fused kernels,
        # batch shapes); train_step reports the first update's.
        "sampler_gap_mean": tok_mean(jnp.abs(old_logp_B_R - logp_B_R)),
        "sampler_gap_max": jnp.max(jnp.where(mask_B_R > 0, jnp.abs(old_logp_B_R - logp_B_R),
                                             0.0)),
    }
    loss = pg_loss
    if entropy_coef > 0.0:
        loss = loss - entropy_coef * agg(entropy_B_R)
    if kl_coef > 0.0:
        if ref_logp_B_R is None:
            raise ValueError("kl_coef > 0 needs reference log-probs")
        kl = agg(kl_estimate(logp_B_R, ref_logp_B_R, kl_estimator))
        loss = loss + kl_coef * kl
        metrics["kl_ref"] = kl
    metrics["loss"] = loss
    return loss, metrics


def value_loss(values_B_R: jax.Array, old_values_B_R: jax.Array, returns_B_R: jax.Array,
               mask_B_R: jax.Array, clip: float,
               total: Counts | None = None) -> tuple[jax.Array, dict]:
    """PPO's clipped value loss (Schulman et al. 2017, arXiv:1707.06347; the clipping as in
    OpenAI baselines), token-mean over valid tokens:

        V_clip = V_old + clip(V - V_old, -c, c)
        L_V    = 1/2 * max((V - R)^2, (V_clip - R)^2)

    `clip <= 0` turns the clipping off. Returns (loss, metrics); `total` as in
    `policy_gradient_loss`."""
    err_B_R = jnp.square(values_B_R - returns_B_R)
    if clip > 0.0:
        v_clip_B_R = old_values_B_R + jnp.clip(values_B_R - old_values_B_R, -clip, clip)
        err_clip_B_R = jnp.square(v_clip_B_R - returns_B_R)
        clipped_B_R = (err_clip_B_R > err_B_R).astype(jnp.float32)
        err_B_R = jnp.maximum(err_B_R, err_clip_B_R)
    else:
        clipped_B_R = jnp.zeros_like(err_B_R)
    tok_mean = lambda x: aggregate(x, mask_B_R, "token-mean", total=total)
    loss = 0.5 * tok_mean(err_B_R)
    return loss, {"value_loss": loss, "value_clip_frac": tok_mean(clipped_B_R),
                  "value_mean": tok_mean(values_B_R)}


def sft_loss(logp_B_R: jax.Array, mask_B_R: jax.Array) -> tuple[jax.Array, dict]:
    """Negative log-likelihood of the demonstration tokens, token-mean."""
    nll = -masked_mean(logp_B_R, mask_B_R)
    return nll, {"loss": nll}
