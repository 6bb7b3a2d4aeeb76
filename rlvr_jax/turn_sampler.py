"""Multi-turn sampler: the policy's turns and an environment's observations in one KV cache,
with static shapes (one compile per piece, however many turns a row takes).

    s = make_turn_sampler(model, max_new_tokens=R, observation_tokens=O, stops=[[id, ...]], ...)
    state = s.start(params, prompt_B_L, prompt_mask_B_L, key, rows_B)   # prefill
    state = s.decode(params, state)      # every live row decodes until EOS, a stop sequence
                                         # (a tool call's end marker) or its budget R
    state = s.extend(params, state, obs_B_O, obs_len_B, end_B)  # the observations' ids into
                                         # the cache (no re-prefill); those rows decode again
    rollout = s.rollout(state)

Streamed episodes (rlvr_jax/streaming.py) use the same pieces on B rows that episodes flow
through: `empty(b, q)` makes B free rows and Q prompt slots, `prompts` prefills each waiting
prompt once into a slot, `insert` starts episodes in free rows from their prompts' slots, and
`decode(params, state, max_steps)` stops after at most that many steps (a chunk), whatever
the other rows do. A row's computation is the same in either driver.

Each row has its own response column (`col_B`): its turns and observations are contiguous
in its R response slots, so its positions are those the trainer's forward gives the same
sequence (prompt ++ response under the attention mask), and its tokens do not depend on
where its batch-mates' turns end. The uniform behind the draw at column c of row b is
u[b, c] of its sequence's own stream (sampling.sequence_uniforms: the step's key, the
sequence's index, the column), drawn once at the start: a row's episode is a function of its
own tokens, its index and the key.

The record keeps the masks apart: `mask_B_R` (attention) covers the policy's and the
environment's tokens, `loss_mask_B_R` the policy's own sampled tokens only; observation
tokens have log-prob 0. Tokens only: the host side (rlvr_jax/episodes.py) turns texts into
ids and back.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax import sharding
from rlvr_jax.models.kv_cache import KVCache, decode_weights, empty_cache
from rlvr_jax.models.policy import Decoder
from rlvr_jax.sampling import (draw_at_columns, prefill_groups, put_at_columns,
                               sequence_uniforms)
from rlvr_jax.types import Rollout

# Why a row's current turn stopped (`TurnState.stop_B`).
RUNNING, STOP_EOS, STOP_CALL, STOP_BUDGET = 0, 1, 2, 3


class TurnState(NamedTuple):
    cache: KVCache  # B rows, S = L + R + O slots (O of slack: a write never runs past S)
    logits_B_V: jax.Array  # float32: each row's next-token distribution
    col_B: jax.Array  # int32: the row's next free response column
    turn_start_B: jax.Array  # int32: the first column of the row's current turn
    position_B: jax.Array  # int32: the prompt's real tokens (the position of column 0)
    live_B: jax.Array  # bool: decoding in the current turn
    done_B: jax.Array  # bool: the episode is over
    stop_B: jax.Array  # int32: why the current turn stopped (RUNNING while live)
    tokens_B_R: jax.Array  # int32, pad where nothing was written
    logp_B_R: jax.Array  # float32 sampler log-probs of the policy's tokens, 0 elsewhere
    mask_B_R: jax.Array  # float32 attention: policy and observation tokens
    loss_mask_B_R: jax.Array  # float32: the policy's own tokens
    u_B_R: jax.Array  # float32 uniforms, one per row and column
    steps: jax.Array  # int32 []: decode steps run (row-steps = steps x B)


class Prompts(NamedTuple):
    """Prefilled prompts waiting for their episodes to be inserted (streamed episodes: each
    prompt is prefilled once, for every episode of its group, whenever each starts)."""

    cache: KVCache  # Q prompt slots of L slots each
    logits_Q_V: jax.Array  # float32: the first token's distribution
    position_Q: jax.Array  # int32: the prompt's real tokens


class TurnSampler(NamedTuple):
    start: Callable  # (params, prompt_B_L, mask_B_L, key, rows_B=None) -> TurnState
    decode: Callable  # (params, state[, max_steps]) -> state (donated)
    extend: Callable  # (params, state, obs_B_O, obs_len_B, end_B) -> state (donated)
    rollout: Callable  # state -> Rollout
    observation_tokens: int  # O
    # Streamed episodes' pieces (made with `prompt_len` L):
    empty: Callable = None  # (b, q) -> (TurnState of b free rows, Prompts of q free slots)
    prompts: Callable = None  # (params, Prompts, prompt_Q_L, mask_Q_L, slot_Q) -> Prompts
    insert: Callable = None  # (state, Prompts, src_M, dest_M, seq_M, key) -> state
    # (params, state, prompt_M_L, pmask_M_L, tokens_M_R, logp_M_R, mask_M_R, loss_mask_M_R,
    #  col_M, start_M, dest_M, seq_M, key) -> state: episodes back, their histories prefilled
    resume: Callable = None
    # (state, rows_M) -> (tokens, logp, mask, loss_mask [M, R], col, turn_start, live [M]):
    # M rows' records and places, to the host without the other rows'
    rows: Callable = None
    # (params, state, max_steps) -> (state, (live_B, col_B before; live_B, stop_B, col_B,
    # turn_start_B after)): `decode`, and its rows' places before and after, read at once
    chunk: Callable = None


def stop_table(stops: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Stop sequences as a right-aligned [M, W] id table (-1 pads the left) and their
    lengths: a turn stops when its last tokens equal one of them."""
    if not stops:
        return np.full((1, 1), -1, np.int32), np.zeros((1,), np.int32)
    width = max(len(s) for s in stops)
    table = np.full((len(stops), width), -1, np.int32)
    for i, s in enumerate(stops):
        table[i, width - len(s):] = s
    return table, np.array([len(s) for s in stops], np.int32)


def ends_with_stop(tokens_B_R, col_B, turn_start_B, table_M_W, lengths_M) -> jax.Array:
    """bool [B]: the tokens before column col_B end with a stop sequence that lies wholly
    inside the current turn (an observation's text never completes a call marker)."""
    m, w = table_M_W.shape
    cols_B_W = col_B[:, None] - w + jnp.arange(w)[None, :]
    last_B_W = jnp.take_along_axis(tokens_B_R, jnp.clip(cols_B_W, 0, None), axis=1)
    hit_B_M_W = (last_B_W[:, None, :] == table_M_W[None]) | (table_M_W[None] < 0)
    inside_B_M = (col_B[:, None] - lengths_M[None, :]) >= turn_start_B[:, None]
    return jnp.any(jnp.all(hit_B_M_W, axis=-1) & inside_B_M & (lengths_M[None, :] > 0), axis=-1)


def start_rows(s: TurnState, dest_M, cache_M: KVCache, logits_M_V, col_M, position_M,
               tokens_M_R, logp_M_R, mask_M_R, loss_mask_M_R, u_M_R,
               start_M=None) -> TurnState:
    """Rows dest_M (B: none, the write dropped) go on live at column col_M, in a turn that
    began at start_M (default col_M: a new turn), with these caches and records (the
    streamed pieces `insert` and `resume`)."""
    at = lambda x, v: x.at[dest_M].set(v, mode="drop")
    m = dest_M.shape[0]
    return s._replace(
        cache=jax.tree.map(at, s.cache, cache_M),  # every cache leaf is rows-first
        logits_B_V=at(s.logits_B_V, logits_M_V), col_B=at(s.col_B, col_M),
        turn_start_B=at(s.turn_start_B, col_M if start_M is None else start_M),
        position_B=at(s.position_B, position_M),
        live_B=at(s.live_B, jnp.ones((m,), bool)), done_B=at(s.done_B, jnp.zeros((m,), bool)),
        stop_B=at(s.stop_B, jnp.zeros((m,), jnp.int32) + RUNNING),
        tokens_B_R=at(s.tokens_B_R, tokens_M_R), logp_B_R=at(s.logp_B_R, logp_M_R),
        mask_B_R=at(s.mask_B_R, mask_M_R), loss_mask_B_R=at(s.loss_mask_B_R, loss_mask_M_R),
        u_B_R=at(s.u_B_R, u_M_R))


def make_turn_sampler(model: Decoder, *, max_new_tokens: int, observation_tokens: int,
                      eos_id: int, pad_id: int, stops: Sequence[Sequence[int]],
                      temperature: float, top_k: int = 0, top_p: float = 1.0,
                      group_size: int = 1, prompt_len: int = 0, mesh=None,
                      resume_columns: int = 64,
                      on_trace: Callable[[str], None] = lambda name: None) -> TurnSampler:
    """The jitted pieces above; `on_trace(name)` runs each time one of them is traced.
    `group_size` G > 1: rows come in groups of G identical prompts, each prefilled once
    (sampling.prefill_groups). `prompt_len` L: the prompts' length for `empty` / `insert`
    (streamed episodes; 0: those pieces are not made), their rows split over `mesh`'s
    data-parallel axes (None: one device). `resume_columns`: the columns of a resumed
    record prefilled per step of `resume`'s loop (its work is the longest history rounded up
    to them, not the whole budget R)."""
    r, o = max_new_tokens, max(observation_tokens, 1)
    table_M_W, lengths_M = (jnp.asarray(x) for x in stop_table(stops))

    def apply(params, method, *args):
        return model.apply({"params": params}, *args, method=method)

    def start(params, prompt_B_L, mask_B_L, key, rows_B=None):
        on_trace("turn_start")
        b, l = prompt_B_L.shape
        rows_B = jnp.arange(b) if rows_B is None else rows_B
        logits_B_V, cache = prefill_groups(partial(apply, params), prompt_B_L, mask_B_L,
                                           l + r + o, group_size)
        zeros_B = jnp.zeros((b,), jnp.int32)
        return TurnState(
            cache, logits_B_V, zeros_B, zeros_B, jnp.sum(mask_B_L.astype(jnp.int32), axis=-1),
            jnp.ones((b,), bool), jnp.zeros((b,), bool), zeros_B,
            jnp.full((b, r), pad_id, jnp.int32), jnp.zeros((b, r), jnp.float32),
            jnp.zeros((b, r), jnp.float32), jnp.zeros((b, r), jnp.float32),
            sequence_uniforms(key, rows_B, r), jnp.int32(0))

    def empty(b: int, q: int) -> tuple[TurnState, Prompts]:
        """B free rows (done, nothing cached) for `insert` to fill, and Q empty prompt
        slots."""
        on_trace("turn_empty")
        zeros_B, zeros_B_R = jnp.zeros((b,), jnp.int32), jnp.zeros((b, r), jnp.float32)
        return (TurnState(empty_cache(model.cfg, b, prompt_len + r + o),
                          jnp.zeros((b, model.vocab_size), jnp.float32), zeros_B, zeros_B,
                          zeros_B, jnp.zeros((b,), bool), jnp.ones((b,), bool), zeros_B,
                          jnp.full((b, r), pad_id, jnp.int32), zeros_B_R, zeros_B_R,
                          zeros_B_R, zeros_B_R, jnp.int32(0)),
                Prompts(empty_cache(model.cfg, q, prompt_len),
                        jnp.zeros((q, model.vocab_size), jnp.float32),
                        jnp.zeros((q,), jnp.int32)))

    def prompts(params, pc: Prompts, prompt_Q_L, mask_Q_L, slot_Q) -> Prompts:
        """Q prompts prefilled into the prompt slots slot_Q (a slot past the last: dropped)."""
        on_trace("turn_prompts")
        logits_Q_V, new = apply(params, "prefill", prompt_Q_L, mask_Q_L, prompt_len)
        at = lambda x, v: x.at[slot_Q].set(v, mode="drop")
        return Prompts(jax.tree.map(at, pc.cache, new), at(pc.logits_Q_V, logits_Q_V),
                       at(pc.position_Q, jnp.sum(mask_Q_L.astype(jnp.int32), axis=-1)))

    def insert(s: TurnState, pc: Prompts, src_M, dest_M, seq_M, key) -> TurnState:
        """M episodes into rows dest_M (B: none, the write dropped), episode m's prompt from
        prompt slot src_M[m] (prefilled once by `prompts`, however many of its group's
        episodes start from it, here or later). Row dest_M[m] then holds a fresh episode of
        sequence seq_M[m] (its own uniforms), live, at column 0."""
        on_trace("turn_insert")
        pick = lambda x: jnp.take(x, src_M, axis=0)
        slots = s.cache.valid_B_S.shape[1]
        pad = lambda x: jnp.pad(x, [(0, 0), (0, slots - prompt_len)] + [(0, 0)] * (x.ndim - 2))
        m = dest_M.shape[0]
        zeros_M_R = jnp.zeros((m, r), jnp.float32)
        cache = jax.tree.map(lambda x: pad(pick(x)), pc.cache)
        return start_rows(s, dest_M, cache, pick(pc.logits_Q_V), jnp.zeros((m,), jnp.int32),
                          pick(pc.position_Q), jnp.full((m, r), pad_id, jnp.int32), zeros_M_R,
                          zeros_M_R, zeros_M_R, sequence_uniforms(key, seq_M, r))

    def resume(params, s: TurnState, prompt_M_L, pmask_M_L, tokens_M_R, logp_M_R, mask_M_R,
               loss_mask_M_R, col_M, start_M, dest_M, seq_M, key) -> TurnState:
        """M episodes that left their rows back into rows dest_M (B: dropped), their
        histories (prompt ++ the response record so far) prefilled under `params`: the
        recompute a released row costs (its observation appended), or a carried episode's
        under new params (streaming.py). Each goes on at column col_M in a turn that began
        at start_M (= col_M: a new one). The prompt is prefilled as `prompts` does, then the
        record in chunks of `resume_columns` columns through `extend` (the path the decode
        and the observations take), only as many chunks as the longest record needs: a
        whole-budget prefill spent most of its work on empty columns (a history of 100
        columns in a budget of 384)."""
        on_trace("turn_resume")
        c = min(resume_columns, r)
        logits_M_V, cache = apply(params, "prefill", prompt_M_L, pmask_M_L, prompt_len + r + o)
        position_M = jnp.sum(pmask_M_L.astype(jnp.int32), axis=-1)
        weights = decode_weights(params, model.cfg)  # cast and split once, not per chunk
        pad = ((0, 0), (0, -r % c))  # whole chunks: a slice never moves back
        tokens = jnp.pad(tokens_M_R, pad, constant_values=pad_id)
        valid = jnp.pad(mask_M_R > 0, pad)
        cut = lambda x, at: jax.lax.dynamic_slice_in_dim(x, at, c, 1)

        def chunk(carry):
            at, cache, x_M_D = carry
            h_M_C_D, cache = apply(weights, "extend", cut(tokens, at), cut(valid, at), cache,
                                   prompt_len + at + jnp.zeros_like(col_M), position_M + at)
            j_M = col_M - 1 - at  # the last column's hidden, if this chunk holds it
            here = jnp.take_along_axis(h_M_C_D, jnp.clip(j_M, 0, c - 1)[:, None, None], 1)[:, 0]
            return at + c, cache, jnp.where(((j_M >= 0) & (j_M < c))[:, None], here, x_M_D)

        x0 = jnp.zeros((col_M.shape[0], model.cfg.hidden_size), model.cfg.compute_dtype)
        _, cache, x_M_D = jax.lax.while_loop(lambda carry: carry[0] < jnp.max(col_M), chunk,
                                             (jnp.int32(0), cache, x0))
        logits_M_V = jnp.where((col_M > 0)[:, None], apply(weights, "head", x_M_D), logits_M_V)
        return start_rows(s, dest_M, cache, logits_M_V, col_M, position_M, tokens_M_R, logp_M_R,
                          mask_M_R, loss_mask_M_R, sequence_uniforms(key, seq_M, r), start_M)

    def take_rows(s: TurnState, rows_M):
        """Rows rows_M's records and places (a streamed episode's copy-out, a call's text)."""
        on_trace("turn_rows")
        return tuple(jnp.take(x, rows_M, axis=0) for x in (
            s.tokens_B_R, s.logp_B_R, s.mask_B_R, s.loss_mask_B_R, s.col_B, s.turn_start_B,
            s.live_B))

    def forward(params, s: TurnState, tokens_B_O, valid_B_O):
        """The new tokens at each row's column into the cache; -> (hidden_B_O_D, cache)."""
        l = s.cache.valid_B_S.shape[1] - r - o
        return apply(params, "extend", tokens_B_O, valid_B_O, s.cache, l + s.col_B,
                     s.position_B + s.col_B)

    def decode(params, s: TurnState, max_steps=None) -> TurnState:
        """Every live row until it stops; `max_steps` (int32, traced): a chunk of at most that
        many steps (the rows still live carry on at the next call)."""
        on_trace("turn_decode")
        params = decode_weights(params, model.cfg)  # cast and split once, not per step

        def body(s: TurnState) -> TurnState:
            live_B = s.live_B
            tok_B, logp_B = draw_at_columns(s.logits_B_V, s.u_B_R, s.col_B, live_B,
                                            temperature=temperature, top_k=top_k, top_p=top_p,
                                            pad_id=pad_id)
            put = lambda x, v: put_at_columns(x, s.col_B[:, None], v[:, None], live_B[:, None])
            ones_B = jnp.ones_like(logp_B)
            tokens_B_R = put(s.tokens_B_R, tok_B)
            hidden, cache = forward(params, s, tok_B[:, None], live_B[:, None])
            col_B = s.col_B + live_B
            eos_B = live_B & (tok_B == eos_id)
            call_B = live_B & ~eos_B & ends_with_stop(tokens_B_R, col_B, s.turn_start_B,
                                                      table_M_W, lengths_M)
            budget_B = live_B & ~eos_B & ~call_B & (col_B >= r)
            stop_B = jnp.where(eos_B, STOP_EOS, jnp.where(call_B, STOP_CALL, jnp.where(
                budget_B, STOP_BUDGET, s.stop_B)))
            return s._replace(
                cache=cache, logits_B_V=apply(params, "head", hidden[:, 0]), col_B=col_B,
                live_B=live_B & ~(eos_B | call_B | budget_B), done_B=s.done_B | eos_B | budget_B,
                stop_B=stop_B, tokens_B_R=tokens_B_R, logp_B_R=put(s.logp_B_R, logp_B),
                mask_B_R=put(s.mask_B_R, ones_B), loss_mask_B_R=put(s.loss_mask_B_R, ones_B),
                steps=s.steps + 1)

        if max_steps is None:
            return jax.lax.while_loop(lambda s: jnp.any(s.live_B), body, s)
        end = s.steps + max_steps
        return jax.lax.while_loop(lambda s: jnp.any(s.live_B) & (s.steps < end), body, s)

    def chunk(params, s: TurnState, max_steps):
        """`decode`'s chunk, and the rows' live and col before it and places after it (their
        own buffers: the state goes on to the next pieces before they are read). The
        streamed driver reads them once the chunk is done, so the pieces of a boundary
        queue behind one another with no read (no wait for the devices) between them, and a
        chunk may be queued ahead of them. No row live: no step."""
        out = decode(params, s, max_steps)
        return out, (s.live_B, s.col_B, out.live_B, out.stop_B, out.col_B, out.turn_start_B)

    def extend(params, s: TurnState, obs_B_O, obs_len_B, end_B) -> TurnState:
        """Rows with obs_len_B > 0 get those observation ids appended and decode again; rows
        with end_B end their episode (the host said so: a final answer, a budget). Before
        the first decode (an episode's first observation) the other rows stay live."""
        on_trace("turn_extend")
        keep_B_O = jnp.arange(o)[None, :] < obs_len_B[:, None]
        cols_B_O = s.col_B[:, None] + jnp.arange(o)[None, :]
        put = lambda x, v: put_at_columns(x, cols_B_O, jnp.broadcast_to(v, cols_B_O.shape), keep_B_O)
        params = decode_weights(params, model.cfg)
        hidden_B_O_D, cache = forward(params, s, obs_B_O, keep_B_O)
        last_B = jnp.maximum(obs_len_B - 1, 0)
        hidden_B_D = jnp.take_along_axis(hidden_B_O_D, last_B[:, None, None], axis=1)[:, 0]
        resume_B = (obs_len_B > 0) & ~end_B & ~s.done_B
        col_B = s.col_B + obs_len_B
        return s._replace(
            cache=cache,
            logits_B_V=jnp.where(resume_B[:, None], apply(params, "head", hidden_B_D),
                                 s.logits_B_V),
            # Only a row that resumes starts a turn: a finished row keeps its last turn's
            # start (its final text, which the verifier reads).
            col_B=col_B, turn_start_B=jnp.where(resume_B, col_B, s.turn_start_B),
            live_B=resume_B | (s.live_B & ~end_B & ~s.done_B), done_B=s.done_B | end_B,
            stop_B=jnp.where(resume_B, RUNNING, s.stop_B),
            tokens_B_R=put(s.tokens_B_R, obs_B_O), mask_B_R=put(s.mask_B_R, 1.0),
            logp_B_R=put(s.logp_B_R, 0.0), loss_mask_B_R=put(s.loss_mask_B_R, 0.0))

    def rollout(s: TurnState) -> Rollout:
        return Rollout(s.tokens_B_R, s.logp_B_R, s.mask_B_R, s.loss_mask_B_R)

    streamed = {}
    if prompt_len:
        # Donated: the rows' cache is written in place, never copied per insert.
        out = {}
        if mesh is not None:  # the rows' layout, fixed for every piece
            rows0 = sharding.rows_sharding(mesh, 0)
            rows = TurnState(rows0, *[rows0] * 12,  # the cache's leaves are rows-first too
                             sharding.replicated(mesh))
            repl = sharding.replicated(mesh)  # a few prompts: on every device
            out = {"empty": {"out_shardings": (rows, Prompts(*[repl] * 3))},
                   "prompts": {"out_shardings": Prompts(*[repl] * 3)},
                   "insert": {"out_shardings": rows}, "resume": {"out_shardings": rows},
                   "chunk": {"out_shardings": (rows, (rows0,) * 6)},
                   "rows": {"out_shardings": repl}}
        streamed = {"empty": jax.jit(empty, static_argnums=(0, 1), **out.get("empty", {})),
                    # Donated: the prompt slots and the rows' cache written in place.
                    "prompts": jax.jit(prompts, donate_argnums=(1,), **out.get("prompts", {})),
                    "insert": jax.jit(insert, donate_argnums=(0,), **out.get("insert", {})),
                    "resume": jax.jit(resume, donate_argnums=(1,), **out.get("resume", {})),
                    "rows": jax.jit(take_rows, **out.get("rows", {})),
                    "chunk": jax.jit(chunk, donate_argnums=(1,), **out.get("chunk", {}))}
    return TurnSampler(jax.jit(start), jax.jit(decode, donate_argnums=(1,)),
                       jax.jit(extend, donate_argnums=(1,)), jax.jit(rollout), o, **streamed)
