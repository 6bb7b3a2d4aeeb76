"""Jitted sampler: one prefill over the left-padded prompts into a static KV cache of L + R
slots, then a `lax.while_loop` that decodes one token per iteration.

    sample = make_sampler(model, max_new_tokens=R, eos_id=..., pad_id=..., temperature=1.0)
    rollout = sample(params, prompt_B_L, prompt_mask_B_L, key, rows_B)

Shapes are fixed by (B, L, R), so a run whose batch shape does not change compiles the sampler
once. The cache lives inside the one compiled call: the loop carry is updated in place (XLA
aliases a while loop's carried buffers), and it is freed when the rollout returns.

Log-probs are those of the sampled token under softmax(logits / temperature), before top-k/top-p
truncation: that is the distribution the trainer's forward recomputes, so importance ratios
compare like with like. Greedy decoding (temperature 0) is for evaluation only: its tokens have
no sampling distribution, and the config refuses it for training (`sampling.temperature`); its
log-probs are reported under softmax(logits).
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from rlvr_jax.models.kv_cache import KVCache, decode_weights
from rlvr_jax.models.policy import Decoder
from rlvr_jax.models.rope import rope_for
from rlvr_jax.types import Rollout


def filter_logits(logits_B_V: jax.Array, top_k: int, top_p: float) -> jax.Array:
    """Set logits outside the top-k / nucleus (top-p) set to -inf.

    top-k keeps the k largest logits (ties with the k-th are kept too); 0 disables it.
    top-p keeps the smallest prefix of tokens sorted by probability whose mass reaches
    `top_p` (Holtzman et al. 2019, arXiv:1904.09751); the most likely token always survives.
    Applied in that order, after temperature, as HF transformers does. Ties at the nucleus
    boundary are kept.
    """
    assert logits_B_V.ndim == 2, logits_B_V.shape
    neg_inf = jnp.asarray(-jnp.inf, logits_B_V.dtype)
    if top_k > 0 and top_k < logits_B_V.shape[-1]:
        kth_B_1 = jax.lax.top_k(logits_B_V, top_k)[0][:, -1:]
        logits_B_V = jnp.where(logits_B_V < kth_B_1, neg_inf, logits_B_V)
    if top_p < 1.0:
        sorted_B_V = jnp.sort(logits_B_V, axis=-1)[:, ::-1]
        probs_B_V = jax.nn.softmax(sorted_B_V, axis=-1)
        mass_before_B_V = jnp.cumsum(probs_B_V, axis=-1) - probs_B_V
        keep_B_V = mass_before_B_V < top_p  # keeps index 0 always (mass before it is 0)
        threshold_B_1 = jnp.min(jnp.where(keep_B_V, sorted_B_V, jnp.inf), axis=-1, keepdims=True)
        logits_B_V = jnp.where(logits_B_V < threshold_B_1, neg_inf, logits_B_V)
    return logits_B_V


def draw_inverse_cdf(logits_B_V: jax.Array, u_B: jax.Array) -> jax.Array:
    """One draw per row from softmax(logits), by inverting the CDF at a uniform u_B in [0, 1).

    With c_j the cumulative mass, the token is the first j with c_j > u * c_V and p_j > 0; a
    token of probability 0 (a logit of -inf) is never drawn. One uniform per row instead of
    `jax.random.categorical`'s Gumbel noise over the whole vocabulary: on XLA:CPU that noise
    (V random words and two logarithms each) made a draw cost ~1.4 ms at B=64, V=512, against
    ~0.3 ms for this one.
    """
    probs_B_V = jnp.exp(logits_B_V - jnp.max(logits_B_V, axis=-1, keepdims=True))
    cdf_B_V = jnp.cumsum(probs_B_V, axis=-1)
    hit_B_V = (cdf_B_V > u_B[:, None] * cdf_B_V[:, -1:]) & (probs_B_V > 0)
    # Rounding could in principle leave no hit; the most likely token is then drawn.
    return jnp.where(jnp.any(hit_B_V, axis=-1), jnp.argmax(hit_B_V, axis=-1),
                     jnp.argmax(logits_B_V, axis=-1))


def sequence_uniforms(key: jax.Array, rows_B: jax.Array, n: int) -> jax.Array:
    """u_B_N[b, t] = uniform(fold_in(fold_in(key, rows_B[b]), t)): the uniform behind token t
    of the step's sequence `rows_B[b]`. A sequence's draws depend on the step's key, its index
    in the step and the token's column only, never on the batch it is sampled in: how many
    chunks the step is cut into, how many decode rows there are or which rows share a batch
    change timing, not tokens (as far as the logits themselves do not depend on the batch)."""
    def row(r):
        k = jax.random.fold_in(key, r)
        return jax.vmap(lambda t: jax.random.uniform(jax.random.fold_in(k, t), (),
                                                     jnp.float32))(jnp.arange(n))

    return jax.vmap(row)(rows_B.astype(jnp.uint32))


def choose_tokens(logits_B_V: jax.Array, u_B: jax.Array, temperature: float, top_k: int,
                  top_p: float) -> tuple[jax.Array, jax.Array]:
    """Draw one token per row at uniforms u_B (unused when greedy); returns (tokens_B, logp_B)
    with logp as the module doc says."""
    if temperature == 0.0:
        tokens_B = jnp.argmax(logits_B_V, axis=-1)
        logp_B_V = jax.nn.log_softmax(logits_B_V, axis=-1)
    else:
        scaled_B_V = logits_B_V / temperature
        logp_B_V = jax.nn.log_softmax(scaled_B_V, axis=-1)
        tokens_B = draw_inverse_cdf(filter_logits(scaled_B_V, top_k, top_p), u_B)
    logp_B = jnp.take_along_axis(logp_B_V, tokens_B[:, None], axis=-1)[:, 0]
    return tokens_B.astype(jnp.int32), logp_B


def draw_at_columns(logits_B_V: jax.Array, u_B_R: jax.Array, col_B: jax.Array,
                    live_B: jax.Array, *, temperature: float, top_k: int, top_p: float,
                    pad_id: int) -> tuple[jax.Array, jax.Array]:
    """Each row's next token at its own response column (the samplers whose rows are at
    different columns: multi-turn, continuous batching): drawn with the row's uniform for that
    column, pad on rows that are not live. -> (tokens_B, logp_B)."""
    r = u_B_R.shape[1]
    u_B = jnp.take_along_axis(u_B_R, jnp.minimum(col_B, r - 1)[:, None], 1)[:, 0]
    tok_B, logp_B = choose_tokens(logits_B_V, u_B, temperature, top_k, top_p)
    return jnp.where(live_B, tok_B, pad_id), logp_B


def put_at_columns(x_B_R: jax.Array, cols_B_O: jax.Array, values_B_O: jax.Array,
                   keep_B_O: jax.Array) -> jax.Array:
    """x[b, cols[b, j]] = values[b, j] where keep (others and out-of-range columns dropped):
    the writes of the samplers whose rows are at different columns."""
    r = x_B_R.shape[1]
    cols = jnp.where(keep_B_O, cols_B_O, r)  # column R is out of range: dropped
    rows = jnp.broadcast_to(jnp.arange(x_B_R.shape[0])[:, None], cols.shape)
    return x_B_R.at[rows, cols].set(values_B_O.astype(x_B_R.dtype), mode="drop")


def prefill_groups(apply: Callable, prompt_B_L: jax.Array, mask_B_L: jax.Array, slots: int,
                   group_size: int):
    """The prefill of B = P x G rows whose prompts come in groups of G identical rows (P_G
    order: a step's samples of one prompt): each prompt's keys and values are computed once
    and copied to its G rows (the copies are needed anyway: each row decodes into its own
    slots). Rows are independent in the prefill, so this gives each row what a per-row prefill
    gives (tested bitwise on CPU), for 1/G of its FLOPs. -> (logits_B_V, KVCache)."""
    if group_size == 1:
        return apply("prefill", prompt_B_L, mask_B_L, slots)
    logits_P_V, cache = apply("prefill", prompt_B_L[::group_size], mask_B_L[::group_size],
                              slots)
    rep = lambda x: jnp.repeat(x, group_size, axis=0)  # every cache leaf is rows-first
    return rep(logits_P_V), jax.tree.map(rep, cache)


class DecodeCarry(NamedTuple):
    """The decode loop's state; step i draws token i and runs its forward."""

    i: jax.Array  # [] int32: the next token's column
    cache: KVCache  # B rows, S = L + R slots
    logits_B_V: jax.Array  # float32: the distribution of token i
    done_B: jax.Array  # bool: the row has emitted EOS
    tokens_B_R: jax.Array  # int32, pad after EOS
    logp_B_R: jax.Array  # float32, 0 after EOS
    mask_B_R: jax.Array  # float32, 1 on tokens up to and including EOS


def phase_ends(steps: int, phases: int) -> list[int]:
    """The decode steps (0 .. steps-1) cut into `phases` runs of near-equal length: each
    run's end (exclusive), increasing, the last = steps."""
    return sorted({-(-steps * f // phases) for f in range(1, phases + 1)} - {0}) or [steps]


def make_sampler(model: Decoder, *, max_new_tokens: int, eos_id: int, pad_id: int,
                 temperature: float, top_k: int = 0, top_p: float = 1.0, group_size: int = 1,
                 phases: int = 1, on_trace: Callable[[], None] = lambda: None):
    """Returns jitted `sample(params, prompt_B_L, prompt_mask_B_L, key, rows_B=None) ->
    Rollout`: `rows_B` (int32) are the sequences' indices in the step (default 0..B-1), which
    with `key` fix each sequence's draws (`sequence_uniforms`).

    `group_size` G > 1: the callers' rows come in groups of G identical prompts (the loop's
    P_G order), each prefilled once (`prefill_groups`).

    `phases` F > 1: the decode loop runs as F loops one after the other, loop f over steps
    up to its end e_f (`phase_ends`), each step's attention reading only the cache's first
    L + e_f slots, static: the slots it can have filled, not all L + R (over a rollout,
    sum_f (L + e_f) x steps_f slot reads instead of (L + R) x steps: ~1.5x fewer when L = R/2
    and F = 4). One compile still, F loop bodies in it. The softmax's sums run over fewer
    masked slots, so the log-probs differ in the last bits: on XLA:CPU the tokens were F =
    1's (tested); on an H200 in bfloat16 some were not (a near tie drawn the other way), and
    the rollout was 6% slower (experiments/bench/README.md: the presets keep F = 1).

    `on_trace` runs each time JAX traces (and so compiles) the sampler: the loop counts these.
    """
    n = max_new_tokens
    if n < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {n}")

    def sample(params, prompt_B_L, prompt_mask_B_L, key, rows_B=None):
        on_trace()
        b, p = prompt_B_L.shape
        rows_B = jnp.arange(b) if rows_B is None else rows_B
        # The prefill runs the stacked layers (lax.scan, as training does); the decode steps
        # the weights cast and split per layer once per call, not at every step.
        weights = decode_weights(params, model.cfg)
        apply = lambda method, *a: model.apply({"params": weights}, *a, method=method)
        logits_B_V, cache = prefill_groups(
            lambda method, *a: model.apply({"params": params}, *a, method=method), prompt_B_L,
            prompt_mask_B_L, p + n, group_size)
        pos_B = jnp.sum(prompt_mask_B_L.astype(jnp.int32), axis=-1)  # position of the next token
        # Rotary tables for every decode step, made once before the loop: computed inside it,
        # XLA fused the sines and cosines into each layer's q and k (recomputed per element).
        cos_B_R_D2, sin_B_R_D2 = rope_for(model.cfg, pos_B[:, None] + jnp.arange(n)[None, :])
        # Every step's uniforms too (one draw per row, see draw_inverse_cdf): random bits inside
        # the loop were a small nested loop of their own on each step.
        u_R_B = sequence_uniforms(key, rows_B, n).T

        def record(c: DecodeCarry) -> tuple[jax.Array, jax.Array, DecodeCarry]:
            """Draw token i from c.logits_B_V and write it (pad on finished rows) into column i."""
            u_B = jax.lax.dynamic_index_in_dim(u_R_B, c.i, axis=0, keepdims=False)
            tok_B, logp_B = choose_tokens(c.logits_B_V, u_B, temperature, top_k, top_p)
            live_B = ~c.done_B
            tok_B = jnp.where(live_B, tok_B, pad_id)
            return tok_B, live_B, c._replace(
                done_B=c.done_B | (tok_B == eos_id),
                tokens_B_R=c.tokens_B_R.at[:, c.i].set(tok_B),
                logp_B_R=c.logp_B_R.at[:, c.i].set(jnp.where(live_B, logp_B, 0.0)),
                mask_B_R=c.mask_B_R.at[:, c.i].set(live_B.astype(jnp.float32)))

        def body(attend_slots: int, c: DecodeCarry) -> DecodeCarry:
            tok_B, live_B, c = record(c)
            rope_B = (jax.lax.dynamic_index_in_dim(cos_B_R_D2, c.i, axis=1, keepdims=False),
                      jax.lax.dynamic_index_in_dim(sin_B_R_D2, c.i, axis=1, keepdims=False))
            logits_B_V, cache = apply("decode_step", tok_B, live_B, rope_B, c.cache, p + c.i,
                                      attend_slots)
            return c._replace(i=c.i + 1, cache=cache, logits_B_V=logits_B_V)

        # The loops draw tokens 0 .. N-2, each followed by its forward; the last token is drawn
        # after them with no forward, whose logits nothing would read (one step of N saved).
        # A loop that stops early (every row finished) leaves pad in that column, and so does
        # the last draw, all its rows being finished.
        def cond(end: int, c: DecodeCarry) -> jax.Array:
            return (c.i < end) & ~jnp.all(c.done_B)

        c = DecodeCarry(jnp.int32(0), cache, logits_B_V, jnp.zeros((b,), bool),
                        jnp.full((b, n), pad_id, jnp.int32), jnp.zeros((b, n), jnp.float32),
                        jnp.zeros((b, n), jnp.float32))
        for end in phase_ends(n - 1, phases):
            # Step i writes slot p + i and attends to slots <= p + i: a phase's last step,
            # i = end - 1, to p + end - 1. One phase reads the whole cache.
            slots = None if phases == 1 else p + end
            c = jax.lax.while_loop(partial(cond, end), partial(body, slots), c)
        _, _, c = record(c)
        # One turn: every generated token is the policy's own, so the loss mask is the
        # attention mask (a multi-turn sampler's differ on the environment's tokens).
        return Rollout(c.tokens_B_R, c.logp_B_R, c.mask_B_R, c.mask_B_R)

    return jax.jit(sample)
