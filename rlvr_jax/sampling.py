"""Jitted sampler: one prefill over the left-padded prompts, then a `lax.while_loop` that decodes
one token per iteration into a static KV cache of P + N slots (on XLA:CPU's unrolled decode
attention, a few such loops in turn, each reading only the cache slots written so far). On
x86-64 CPUs the decode steps' products run in a custom kernel over weights packed once per
rollout (`rlvr_jax/ops/panel_matmul.py`); the prefill's stay XLA's.

    sample = make_sampler(model, max_new_tokens=N, eos_id=..., pad_id=..., temperature=1.0)
    cache, rollout = sample(params, cache, prompt_B_P, prompt_mask_B_P, key)

Shapes are fixed by (B, P, N), so a run whose batch shape does not change compiles the sampler
once. The cache is donated: its buffer is reused by the next call instead of allocating a new
one (it is the largest activation buffer at inference), and stale slots never need zeroing
because every slot a query can see is rewritten before it is read.

Log-probs are those of the sampled token under softmax(logits / temperature), before top-k/top-p
truncation: that is the distribution the trainer's forward recomputes, so importance ratios
compare like with like. With temperature 0 (greedy) they are under softmax(logits).
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp

from rlvr_jax.models.panels import decode_panels, pack_decode_params
from rlvr_jax.models.policy import Decoder, KVCache, decode_phases, positions_from_mask, rope_for
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


def make_sampler(model: Decoder, *, max_new_tokens: int, eos_id: int, pad_id: int,
                 temperature: float, top_k: int = 0, top_p: float = 1.0,
                 on_trace: Callable[[], None] = lambda: None):
    """Returns jitted `sample(params, cache, prompt_B_P, prompt_mask_B_P, key) -> (cache, Rollout)`.

    `on_trace` runs each time JAX traces (and so compiles) the sampler: the loop counts these.
    """
    n = max_new_tokens
    if n < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {n}")

    def sample(params, cache: KVCache, prompt_B_P, prompt_mask_B_P, key):
        on_trace()
        b, p = prompt_B_P.shape
        assert cache.valid_B_S.shape == (b, p + n), "cache must have prompt + max_new_tokens slots"
        apply = lambda *a, **kw: model.apply({"params": params}, *a, **kw)
        # Decode products at M = batch: on CPU, from weights packed once here (a copy of them,
        # alive for the rollout) by a kernel that reads them once per step (`decode_panels`).
        step_params = pack_decode_params(params) if decode_panels(model.cfg, b) else params
        apply_step = lambda *a, **kw: model.apply({"params": step_params}, *a, **kw)
        # Left padding puts every prompt's last real token in slot p - 1: its logits are the
        # only ones the prefill needs.
        logits_B_V, cache = apply(prompt_B_P, prompt_mask_B_P, positions_from_mask(prompt_mask_B_P),
                                  cache=cache, cache_index=0, output="last_logits")
        pos_B = jnp.sum(prompt_mask_B_P.astype(jnp.int32), axis=-1)  # position of the next token
        # Rotary tables for every decode step, made before the loop: computed inside it, XLA
        # fused the sines and cosines into each layer's q and k (recomputed per element).
        cos_B_N_D2, sin_B_N_D2 = rope_for(model.cfg, pos_B[:, None] + jnp.arange(n)[None, :])
        # Every step's uniforms too: the random bits inside the loop were a small nested loop
        # of their own on each step.
        u_N_B = jax.random.uniform(key, (n, b), jnp.float32)

        def record(i, logits_B_V, done_B, tokens_B_N, logp_B_N, mask_B_N):
            """Draw token i from logits_B_V and write it (pad on finished rows) into column i."""
            u_B = jax.lax.dynamic_index_in_dim(u_N_B, i, axis=0, keepdims=False)
            tok_B, logp_B = choose_tokens(logits_B_V, u_B, temperature, top_k, top_p)
            live_B = ~done_B
            tok_B = jnp.where(live_B, tok_B, pad_id)
            tokens_B_N = tokens_B_N.at[:, i].set(tok_B)
            logp_B_N = logp_B_N.at[:, i].set(jnp.where(live_B, logp_B, 0.0))
            mask_B_N = mask_B_N.at[:, i].set(live_B.astype(jnp.float32))
            return tok_B, live_B, done_B | (tok_B == eos_id), tokens_B_N, logp_B_N, mask_B_N

        # Loop carry. Shapes: i [], cache KVCache(B, P+N), logits [B, V], done [B],
        # tokens/logp/mask [B, N]. `attend_slots`: the cache prefix this phase's steps read.
        def body(carry, attend_slots):
            i, cache, logits_B_V, done_B, tokens_B_N, logp_B_N, mask_B_N = carry
            tok_B, live_B, done_B, tokens_B_N, logp_B_N, mask_B_N = record(
                i, logits_B_V, done_B, tokens_B_N, logp_B_N, mask_B_N)
            rope_B_1 = (jax.lax.dynamic_slice_in_dim(cos_B_N_D2, i, 1, axis=1),
                        jax.lax.dynamic_slice_in_dim(sin_B_N_D2, i, 1, axis=1))
            logits_B_1_V, cache = apply_step(tok_B[:, None], live_B[:, None],
                                             (pos_B + i)[:, None], cache=cache,
                                             cache_index=p + i, rope_B_T=rope_B_1,
                                             attend_slots=attend_slots)
            return i + 1, cache, logits_B_1_V[:, 0], done_B, tokens_B_N, logp_B_N, mask_B_N

        # The loop draws tokens 0 .. N-2, each followed by its forward; the last token is drawn
        # after the loop with no forward, whose logits nothing would read (one step of N saved).
        # A loop that stops early (every row finished) leaves pad in that column, and so does
        # the last draw, all its rows being finished.
        def cond(carry, steps_end):
            return (carry[0] < steps_end) & ~jnp.all(carry[3])

        carry = (jnp.int32(0), cache, logits_B_V, jnp.zeros((b,), bool),
                 jnp.full((b, n), pad_id, jnp.int32), jnp.zeros((b, n), jnp.float32),
                 jnp.zeros((b, n), jnp.float32))
        # Step i writes slot p + i and reads slots 0 .. p + i. Where the model offers phases,
        # the steps whose slots end at or below a phase's bound read just that many slots (a
        # loop each, run one after the other); the last loop reads the whole cache.
        bounds = [s for s in decode_phases(model.cfg, b, p + n) if p < s < p + n - 1]
        for attend_slots in bounds + [None]:
            steps_end = n - 1 if attend_slots is None else attend_slots - p
            carry = jax.lax.while_loop(partial(cond, steps_end=steps_end),
                                       partial(body, attend_slots=attend_slots), carry)
        i, cache, logits_B_V, done_B, tokens_B_N, logp_B_N, mask_B_N = carry
        _, _, _, tokens_B_N, logp_B_N, mask_B_N = record(i, logits_B_V, done_B, tokens_B_N,
                                                         logp_B_N, mask_B_N)
        return cache, Rollout(tokens_B_N, logp_B_N, mask_B_N)

    # Donate the cache (argument 1): the returned cache reuses its buffer.
    return jax.jit(sample, donate_argnums=(1,))
