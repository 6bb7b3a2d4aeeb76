"""The update's rows packed without padding (jittable): the layout of levanter's packed batches
and verl's remove-padding, with each group's prompt kept once, for an update whose responses
have long-tailed lengths.

A minibatch row is a left-padded prompt ++ a right-padded response (batching.py), in groups
of G rows that share one prompt (P_G order; G = 1: every row its own group). The plan:

  * a response's *segment* is its row's slots L-1 .. L-1+n: the last prompt token (whose
    hidden state predicts the first response token, so each response carries its own copy)
    and the response's span up to its last real slot (holes inside the span, such as a
    masked slot between turns, are kept, masked);
  * the segments go into packed rows of `capacity` slots, group by group (longest groups
    first, each group's segments longest first; ties by index: the plan is a function of the
    lengths only), each in the first row with room for it and, when that row holds none of
    its group yet, for its group's *prompt head* (the real prompt slots but the last). A
    *unit* is one group's slots in one row: its head, computed once, and its segments. A
    group whose responses fill one row computes its prompt once. Every segment fits an empty
    row (capacity >= L + R), so rows = B always suffice, and the rows used are a prefix.

In a packed row a token attends to the earlier real tokens of its own unit's prompt head and
of its own segment (`attention_mask`), at the position it has in its padded row, so every
response token gets the hidden state its padded row gives it (to float32 rounding: sums in
another order). `predictor_B_R` names, for each response slot, the packed slot whose hidden
state predicts it, and the token after that slot is the response token: the head runs on the
packed slots and its log-probs are gathered back to [B, R] for the losses, whose whole-
minibatch normalisers are unchanged. The update (train_step.py) cuts the packed rows into
microbatches of a fixed number of rows and skips the empty ones, so its work follows the
real tokens while its shapes stay fixed (one compile). Measured: experiments/bench/
efficiency.py (positions per real token at gsm8k_grpo's shapes, padded against packed).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from rlvr_jax.losses import chunked_logp_and_entropy


class Plan(NamedTuple):
    """Where a minibatch's B rows sit in B packed rows of C slots (flat slot = row x C + col)."""

    source_S: jax.Array  # int32 [B x C]: the flat [B x T] slot each packed slot copies; -1 empty
    unit_S: jax.Array  # int32: the slot's unit + 1; 0 on empty slots
    segment_S: jax.Array  # int32: 0 on a unit's prompt head, b + 1 on row b's segment
    predictor_B_R: jax.Array  # int32: the packed slot predicting response token (b, t); -1 none
    rows_used: jax.Array  # int32 scalar: packed rows holding anything (a prefix of the rows)


def spans(input_mask_B_T: jax.Array, prompt_len: int) -> tuple[jax.Array, jax.Array]:
    """(first_B, n_B): each row's first real prompt slot (L-1 when it has none) and its
    response span, up to its last real slot inclusive (0: nothing real in the response)."""
    real_B_T = input_mask_B_T > 0
    l, r = prompt_len, input_mask_B_T.shape[1] - prompt_len
    prompt_B_L, resp_B_R = real_B_T[:, :l], real_B_T[:, l:]
    first_B = jnp.where(prompt_B_L.any(-1), jnp.argmax(prompt_B_L, -1), l - 1)
    n_B = jnp.where(resp_B_R.any(-1), r - jnp.argmax(resp_B_R[:, ::-1], -1), 0)
    return first_B.astype(jnp.int32), n_B.astype(jnp.int32)


def plan(input_mask_B_T: jax.Array, prompt_len: int, group_size: int, capacity: int) -> Plan:
    """The packing of B rows (groups of `group_size` sharing a prompt) into B rows of
    `capacity` >= T slots: see the module docstring. Segments are placed group by group (the
    longest groups first, each group's segments longest first), each in the first row with
    room for it (and for its group's prompt head, if that row does not hold it yet)."""
    b, t = input_mask_B_T.shape
    l, r, g, c = prompt_len, t - prompt_len, group_size, capacity
    if c < t:
        raise ValueError(f"packed rows of {c} slots cannot hold a row of {t}")
    p = b // g
    first_B, n_B = spans(input_mask_B_T, l)
    first_P = first_B.reshape(p, g)[:, 0]
    head_P = l - 1 - first_P  # the prompt slots before the last, computed once per unit
    seg_B = jnp.where(n_B > 0, n_B + 1, 0)
    group_B = jnp.arange(b) // g
    total_P = head_P + seg_B.reshape(p, g).sum(-1)
    order = jnp.lexsort((-seg_B, -total_P[group_B]))  # last key first: groups, then segments

    def place(carry, i):
        free_K, head_K_P = carry
        q, n = group_B[i], seg_B[i]
        need_K = n + jnp.where(head_K_P[:, q] < 0, head_P[q], 0)
        k = jnp.argmax(free_K >= need_K)
        new_head = head_K_P[k, q] < 0
        at = c - free_K[k]
        seg_at = jnp.where(new_head, at + head_P[q], at)
        go = n > 0
        free_K = free_K.at[k].add(jnp.where(go, -need_K[k], 0))
        head_K_P = head_K_P.at[k, q].set(jnp.where(go & new_head, at, head_K_P[k, q]))
        return (free_K, head_K_P), (jnp.where(go, k, -1), seg_at,
                                    jnp.where(go & new_head, at, -1))

    init = (jnp.full(b, c, jnp.int32), jnp.full((b, p), -1, jnp.int32))
    (free_K, _), (row_o, seg_o, head_o) = jax.lax.scan(place, init, order)
    back = lambda x: jnp.zeros_like(x).at[order].set(x)
    row_B, seg_at_B, head_at_B = back(row_o), back(seg_o), back(head_o)
    unit_B = row_B * p + group_B + 1  # a unit: one group's slots in one row
    drop = b * c
    # Each prompt head where a segment opened it, each segment after (its row's slots L-1 ..).
    col_L = jnp.arange(l)[None, :]
    dest_B_L = jnp.where((head_at_B[:, None] >= 0) & (col_L < head_P[group_B][:, None]),
                         row_B[:, None] * c + head_at_B[:, None] + col_L, drop).reshape(-1)
    src_B_L = ((group_B * g)[:, None] * t + first_P[group_B][:, None] + col_L).reshape(-1)
    col_R1 = jnp.arange(r + 1)[None, :]
    base_B = row_B * c + seg_at_B
    dest_B_R1 = jnp.where(col_R1 < seg_B[:, None], base_B[:, None] + col_R1, drop).reshape(-1)
    src_B_R1 = (jnp.arange(b)[:, None] * t + (l - 1) + col_R1).reshape(-1)
    per = lambda x, n: jnp.repeat(x, n)
    source_S = (jnp.full(b * c, -1, jnp.int32).at[dest_B_L].set(src_B_L, mode="drop")
                .at[dest_B_R1].set(src_B_R1, mode="drop"))
    unit_S = (jnp.zeros(b * c, jnp.int32).at[dest_B_L].set(per(unit_B, l), mode="drop")
              .at[dest_B_R1].set(per(unit_B, r + 1), mode="drop"))
    segment_S = jnp.zeros(b * c, jnp.int32).at[dest_B_R1].set(per(jnp.arange(b) + 1, r + 1),
                                                             mode="drop")
    col_R = jnp.arange(r)[None, :]
    predictor_B_R = jnp.where(col_R < n_B[:, None], base_B[:, None] + col_R, -1)
    return Plan(source_S, unit_S, segment_S, predictor_B_R.astype(jnp.int32),
                jnp.sum(free_K < c).astype(jnp.int32))


class Micro(NamedTuple):
    """One microbatch of k packed rows, ready for `Decoder.forward_packed`."""

    tokens_K_C: jax.Array
    valid_K_C: jax.Array  # the copied slots' input mask (0 on empty slots and holes)
    positions_K_C: jax.Array  # each copied slot's position in its padded row
    unit_K_C: jax.Array
    segment_K_C: jax.Array
    predictor_B_R: jax.Array  # the slot (within this microbatch) predicting (b, t); -1 none


def micro(p: Plan, j, rows: int, capacity: int, tokens_B_T, input_mask_B_T,
          positions_B_T) -> Micro:
    """Microbatch j: packed rows j x k .. j x k + k - 1 (k = `rows`), copied from the padded
    rows (`positions_B_T`: their positions, Decoder's positions_from_mask)."""
    n = rows * capacity
    start = j * n
    cut = lambda x: jax.lax.dynamic_slice_in_dim(x, start, n)
    src = cut(p.source_S)
    take = lambda x: jnp.where(src >= 0, x.reshape(-1)[jnp.maximum(src, 0)], 0).reshape(
        rows, capacity)
    inside = (p.predictor_B_R >= start) & (p.predictor_B_R < start + n)
    return Micro(take(tokens_B_T), take(input_mask_B_T), take(positions_B_T),
                 cut(p.unit_S).reshape(rows, capacity), cut(p.segment_S).reshape(rows, capacity),
                 jnp.where(inside, p.predictor_B_R - start, -1))


def attention_mask(valid_K_C, unit_K_C, segment_K_C) -> jax.Array:
    """mask_K_C_C: a query sees the earlier real tokens of its own unit's prompt head
    (segment 0) and of its own segment."""
    c = valid_K_C.shape[1]
    causal = jnp.arange(c)[None, :] <= jnp.arange(c)[:, None]
    seg_q, seg_k = segment_K_C[:, :, None], segment_K_C[:, None, :]
    return (causal[None] & (valid_K_C[:, None, :] > 0)
            & (unit_K_C[:, :, None] == unit_K_C[:, None, :]) & (unit_K_C[:, :, None] > 0)
            & ((seg_k == 0) | (seg_k == seg_q)))


def gather(x_K_C: jax.Array, predictor_B_R: jax.Array) -> jax.Array:
    """A per-slot quantity [k, C, ...] at each response slot's predicting slot: [B, R, ...],
    zeros where there is none (outside spans, rows of other microbatches)."""
    flat = x_K_C.reshape(-1, *x_K_C.shape[2:])
    got = flat[jnp.maximum(predictor_B_R, 0)]
    keep = (predictor_B_R >= 0).reshape(*predictor_B_R.shape, *([1] * (got.ndim - 2)))
    return jnp.where(keep, got, jnp.zeros((), got.dtype))


def logp(model, params, micro: Micro, temperature: float):
    """(logp_B_R, entropy_B_R, hidden_K_C_D): `response_logp` over one packed microbatch
    (rlvr_jax/train_step.py). The head runs on its packed slots, each predicting the next slot's token;
    log-probs and entropies are gathered back to the minibatch's [B, R] (zeros for the rows
    of other microbatches), the hidden states stay packed (for a value head: gather them with
    `gather` after it)."""
    apply = lambda method, *a: model.apply({"params": params}, *a, method=method)
    hidden_K_C_D = apply("forward_packed", *micro[:5])
    next_K_C = jnp.pad(micro.tokens_K_C[:, 1:], ((0, 0), (0, 1)))
    logp_K_C, entropy_K_C = chunked_logp_and_entropy(
        hidden_K_C_D, lambda h: apply("head", h), next_K_C, temperature,
        model.cfg.logits_chunk_tokens)
    return (gather(logp_K_C, micro.predictor_B_R),
            gather(entropy_K_C, micro.predictor_B_R), hidden_K_C_D)


def over_batch(per_micro: Callable[[Micro], tuple], input_mask_B_T, prompt_len: int,
               group_size: int, capacity: int, rows: int, tokens_B_T, positions_B_T,
               place: Callable[[Micro], Micro] = lambda m: m) -> tuple:
    """Per-token quantities over a whole batch packed, no gradient kept: `per_micro(micro)`
    gives a tuple of [B, R, ...] arrays (zeros for the rows of other microbatches: `gather`),
    summed over the batch's microbatches of `rows` packed rows of `capacity` slots in turn,
    the empty ones skipped (one compile: the count is static, the skip a cond). What the
    update's proximal log-probs and PPO's preparation (values, reference log-probs) run
    through, packed as the update is. `place`: e.g. the packed rows spread over devices."""
    b = tokens_B_T.shape[0]
    p = plan(input_mask_B_T, prompt_len, group_size, capacity)
    one = lambda j: per_micro(place(micro(p, j, rows, capacity, tokens_B_T, input_mask_B_T,
                                             positions_B_T)))
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(one, 0))

    def accumulate(total, j):
        got = jax.lax.cond(j * rows < p.rows_used, one, lambda _: zeros, j)
        return jax.tree.map(jnp.add, total, got), None

    return jax.lax.scan(accumulate, zeros, jnp.arange(-(-b // rows)))[0]


def positions_per_token(input_mask_B_T, prompt_len: int, group_size: int, positions):
    """The update's positions over its real tokens (each group's prompt counted once, with the
    response spans up to their last real slot): 1.0 is no padding."""
    first_B, n_B = spans(input_mask_B_T, prompt_len)
    real = jnp.sum((prompt_len - first_B)[::group_size]) + jnp.sum(n_B)
    return positions / jnp.maximum(real, 1)
