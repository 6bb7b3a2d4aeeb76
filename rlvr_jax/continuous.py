"""Continuous batching (issue 29): a fixed set of B decode rows; a row that finishes takes the
next waiting sequence, whose prompt is prefilled and inserted into that row's cache slots.
Shapes are static (one compile per piece, whatever the number of sequences), and the rows
stay busy: a static batch decodes until its longest row ends, so on long-tailed lengths most
row-steps of a static batch produce nothing.

    cb = make_continuous_sampler(model, max_new_tokens=R, prompt_len=L, rows=B, insert_rows=M,
                                 eos_id=..., pad_id=..., temperature=...)
    rollout_N, stats = cb.run(params, prompt_N_L, mask_N_L, key, seq_N, put)   # host driver

Pieces (jitted): `insert` prefills M waiting prompts and writes them into M free rows (a row
index of B means "none": the write is dropped); `decode` steps every live row (each at its own
response column, the multi-turn sampler's per-row extend) until at least `free_target` rows
are free or none is live. Each sequence draws from its own stream (sampling.sequence_uniforms:
the key, its index, the column), so its tokens are the static sampler's for the same index,
as far as the logits agree: the rows here attend through `extend` (the reference attention),
the static sampler through `decode_step`'s, which differ in the last float bits on CPU.

Used by evaluation (`eval.decode_rows`). The RL step's batches, asynchronous ones included
(rollouts.py), still come from the static sampler: a step trains on all of its sequences at
once, so refilling rows would only pay if sequences streamed across steps.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax import distributed, sharding
from rlvr_jax.models.kv_cache import KVCache, decode_weights, empty_cache
from rlvr_jax.models.policy import Decoder
from rlvr_jax.sampling import draw_at_columns, put_at_columns, sequence_uniforms
from rlvr_jax.types import Rollout


class Rows(NamedTuple):
    """The B decode rows."""

    cache: KVCache  # B rows, S = L + R + 1 slots (one of slack: a finished row's write)
    logits_B_V: jax.Array  # float32: each row's next-token distribution
    seq_B: jax.Array  # int32: the sequence in the row (-1: none yet)
    col_B: jax.Array  # int32: the next response column
    position_B: jax.Array  # int32: the prompt's real tokens (the position of column 0)
    live_B: jax.Array  # bool: decoding
    tokens_B_R: jax.Array  # int32, pad where nothing was written
    logp_B_R: jax.Array  # float32 sampler log-probs, 0 elsewhere
    mask_B_R: jax.Array  # float32: tokens up to and including EOS
    u_B_R: jax.Array  # float32: each row's sequence's uniforms
    steps: jax.Array  # int32 []: decode steps run (row-steps = steps x B)


class ContinuousSampler(NamedTuple):
    init: Callable  # () -> Rows (every row free)
    insert: Callable  # (params, rows, prompt_M_L, mask_M_L, seq_M, dest_M, key) -> Rows
    decode: Callable  # (params, rows, free_target) -> Rows
    run: Callable  # host driver, see the module docstring


def make_continuous_sampler(model: Decoder, *, max_new_tokens: int, prompt_len: int,
                            rows: int, insert_rows: int, eos_id: int, pad_id: int,
                            temperature: float, top_k: int = 0, top_p: float = 1.0,
                            mesh=None, on_trace: Callable[[str], None] = lambda name: None
                            ) -> ContinuousSampler:
    """`mesh`: the rows are split over its data-parallel axes (every piece keeps them so:
    one compile each); None: one device."""
    r, l, b, m = max_new_tokens, prompt_len, rows, insert_rows
    if not 1 <= m <= b:
        raise ValueError(f"insert_rows must be in [1, rows={b}], got {m}")
    cfg = model.cfg
    slots = l + r + 1
    apply = lambda params, method, *a: model.apply({"params": params}, *a, method=method)

    def init() -> Rows:
        zeros_B = jnp.zeros((b,), jnp.int32)
        return Rows(empty_cache(cfg, b, slots),
                    jnp.zeros((b, model.vocab_size), jnp.float32), zeros_B - 1, zeros_B,
                    zeros_B, jnp.zeros((b,), bool), jnp.full((b, r), pad_id, jnp.int32),
                    jnp.zeros((b, r), jnp.float32), jnp.zeros((b, r), jnp.float32),
                    jnp.zeros((b, r), jnp.float32), jnp.int32(0))

    def insert(params, s: Rows, prompt_M_L, mask_M_L, seq_M, dest_M, key) -> Rows:
        on_trace("continuous_insert")
        logits_M_V, new = apply(params, "prefill", prompt_M_L, mask_M_L, slots)
        at = lambda x, v: x.at[dest_M].set(v, mode="drop")
        ones_M = jnp.ones_like(seq_M, bool)
        return s._replace(
            cache=jax.tree.map(at, s.cache, new),  # every cache leaf is rows-first
            logits_B_V=at(s.logits_B_V, logits_M_V), seq_B=at(s.seq_B, seq_M),
            col_B=at(s.col_B, 0 * seq_M),
            position_B=at(s.position_B, jnp.sum(mask_M_L.astype(jnp.int32), axis=-1)),
            live_B=at(s.live_B, ones_M),
            tokens_B_R=at(s.tokens_B_R, jnp.full((m, r), pad_id, jnp.int32)),
            logp_B_R=at(s.logp_B_R, jnp.zeros((m, r), jnp.float32)),
            mask_B_R=at(s.mask_B_R, jnp.zeros((m, r), jnp.float32)),
            u_B_R=at(s.u_B_R, sequence_uniforms(key, seq_M, r)))

    def decode(params, s: Rows, free_target) -> Rows:
        on_trace("continuous_decode")
        params = decode_weights(params, model.cfg)  # cast and split once, not per step

        def body(s: Rows) -> Rows:
            live_B = s.live_B
            tok_B, logp_B = draw_at_columns(s.logits_B_V, s.u_B_R, s.col_B, live_B,
                                            temperature=temperature, top_k=top_k, top_p=top_p,
                                            pad_id=pad_id)
            put = lambda x, v: put_at_columns(x, s.col_B[:, None],
                                              jnp.broadcast_to(v, live_B.shape)[:, None],
                                              live_B[:, None])
            hidden, cache = apply(params, "extend", tok_B[:, None], live_B[:, None], s.cache,
                                  l + s.col_B, s.position_B + s.col_B)
            col_B = s.col_B + live_B
            still_B = live_B & (tok_B != eos_id) & (col_B < r)
            return s._replace(
                cache=cache, logits_B_V=apply(params, "head", hidden[:, 0]), col_B=col_B,
                live_B=still_B, tokens_B_R=put(s.tokens_B_R, tok_B),
                logp_B_R=put(s.logp_B_R, logp_B), mask_B_R=put(s.mask_B_R, 1.0),
                steps=s.steps + 1)

        cond = lambda s: jnp.any(s.live_B) & (jnp.sum(~s.live_B) < free_target)
        return jax.lax.while_loop(cond, body, s)

    out = {}
    if mesh is not None:  # the rows' layout, fixed for every piece (else each call's differs)
        rows0 = sharding.rows_sharding(mesh, 0)
        out["out_shardings"] = Rows(rows0, *[rows0] * 9,  # the cache's leaves rows-first too
                                    sharding.replicated(mesh))
    init_j = jax.jit(init, **out)
    # Donated: the rows' cache is updated in place, never copied per call.
    insert_j = jax.jit(insert, donate_argnums=(1,), **out)
    decode_j = jax.jit(decode, donate_argnums=(1,), **out)

    def run(params, prompt_N_L: np.ndarray, mask_N_L: np.ndarray, key, seq_N: np.ndarray,
            put: Callable = jnp.asarray) -> tuple[Rollout, dict]:
        """Every sequence through the rows (host arrays in, host arrays out, in input order);
        stats: decode steps, row-steps, and the share of row-steps that made a token."""
        n = len(prompt_N_L)
        res = Rollout(np.full((n, r), pad_id, np.int32), np.zeros((n, r), np.float32),
                      np.zeros((n, r), np.float32), np.zeros((n, r), np.float32))
        owner_B = np.full(b, -1)  # host: which input row each decode row holds
        waiting = list(range(n))
        s = init_j()
        while True:
            live_B, seq_B = (np.asarray(x) for x in distributed.to_host((s.live_B, s.seq_B)))
            done = [i for i in range(b) if owner_B[i] >= 0 and not live_B[i]]
            if done:
                tokens, logp, mask = (np.asarray(x) for x in distributed.to_host(
                    (s.tokens_B_R, s.logp_B_R, s.mask_B_R)))
                for i in done:
                    j = owner_B[i]
                    res.tokens_B_R[j], res.logp_B_R[j], res.mask_B_R[j] = (
                        tokens[i], logp[i], mask[i])
                    owner_B[i] = -1
            free = [i for i in range(b) if owner_B[i] < 0]
            while waiting and free:
                take, waiting = waiting[:min(m, len(free))], waiting[min(m, len(free)):]
                dest, free = free[:len(take)], free[len(take):]
                pick = take + [take[0]] * (m - len(take))  # padding rows: dropped (dest B)
                s = insert_j(params, s, put(prompt_N_L[pick]), put(mask_N_L[pick]),
                             put(np.asarray(seq_N, np.int32)[pick]),
                             put(np.asarray(dest + [b] * (m - len(take)), np.int32)), key)
                owner_B[dest] = take
            if not (owner_B >= 0).any():
                break
            # Stop to refill once M rows are free; with nothing waiting, run the rest out.
            s = decode_j(params, s, jnp.int32(m if waiting else b))
        np.copyto(res.loss_mask_B_R, res.mask_B_R)  # one turn: every token is the policy's
        steps = int(distributed.to_host(s.steps))
        made = float(res.mask_B_R.sum())
        return res, {"decode_steps": steps, "row_steps": steps * b,
                     "useful_fraction": made / max(steps * b, 1)}

    return ContinuousSampler(init_j, insert_j, decode_j, run)


def simulate_steps(lengths_N: np.ndarray, rows: int, insert_rows: int) -> int:
    """The decode steps `run` takes for sequences of these lengths (tokens up to EOS, at most
    R), by the same schedule on the host, no model: for counting work at real sizes
    (experiments/bench/efficiency.py; tests check it against `run`)."""
    left_B = np.zeros(rows, np.int64)  # tokens still to make; 0: free (or finished)
    waiting, steps = list(np.asarray(lengths_N, np.int64)), 0
    while True:
        free = list(np.flatnonzero(left_B == 0))
        while waiting and free:
            k = min(insert_rows, len(free), len(waiting))
            take, waiting = waiting[:k], waiting[k:]
            left_B[free[:k]], free = take, free[k:]
        if not (left_B > 0).any():
            return steps
        target = insert_rows if waiting else rows
        while (left_B > 0).any() and (left_B == 0).sum() < target:
            left_B = np.maximum(left_B - 1, 0)
            steps += 1
