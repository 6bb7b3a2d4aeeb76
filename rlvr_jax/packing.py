"""Packing sequences into rows without padding (host numpy): the layout of levanter's packed
batches and verl's remove-padding, for an update whose rows have long-tailed lengths.

A batch row is a left-padded prompt ++ a right-padded response (batching.py): its real tokens
are one span, from its first to its last real slot (holes inside the span, such as a masked
slot between turns, are kept, masked). `pack` places the spans one after another in rows of
`capacity` slots, first-fit by decreasing length, and names each slot's sequence (segment
id b + 1; 0 on empty slots); `Decoder.forward(tokens, mask, segment)` then attends within a
segment and restarts positions at each, so every sequence gets the hidden states its own row
gives. `unpack_index` maps each unpacked slot to its packed slot, for gathering per-position
outputs (hidden states, log-probs) back to the [B, T] layout the losses read.

Measured motivation (experiments/bench/efficiency.py): at gsm8k_grpo's shapes with the
issue's long-tailed response lengths, response padding is ~52% of the update's positions
after each group's prompt is computed once. The update does not use packing yet; this is the
layout and the model support it will run on, tested to give the per-row hidden states. What
the update still needs, as worked out for it:
  * pack per microbatch, not per row: M microbatches of m rows x T slots, sequences assigned
    first-fit decreasing under two budgets, m x T tokens and m x R response tokens (so the
    head runs on a fixed m x R gathered positions, never on prompt slots), falling back to
    one sequence per row (always within both) if first-fit needs more than M;
  * the step's microbatch scan skips the empty ones (`lax.cond`: a real branch on every
    backend), so its work follows the packed rows while its shapes stay fixed (one compile);
  * each microbatch's log-probs gathered to the minibatch's [B, R] (zeros and no loss mask
    for the rows elsewhere), so losses.py and its whole-minibatch normalisers are unchanged;
  * the minibatch permutation drawn on the host (train_step.update_rows), since the packing
    depends on which rows share a minibatch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Packed(NamedTuple):
    tokens_K_C: np.ndarray  # int32 K packed rows of C slots (pad id on empty slots)
    mask_K_C: np.ndarray  # int32 1 on real tokens (each span's own mask, holes kept)
    segment_K_C: np.ndarray  # int32 sequence b's slots hold b + 1; empty slots 0
    row_B: np.ndarray  # int32 the packed row of each sequence (-1: empty sequence)
    start_B: np.ndarray  # int32 its span's first slot in that row
    first_B: np.ndarray  # int32 its span's first column in the unpacked row
    length_B: np.ndarray  # int32 its span's length (0: nothing real)
    rows_used: int  # packed rows holding at least one sequence


def spans(mask_B_T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first_B, length_B): each row's first real slot and the length of its span up to its
    last real slot inclusive; (0, 0) for a row with no real token."""
    real_B_T = np.asarray(mask_B_T) > 0
    any_B = real_B_T.any(axis=1)
    t = real_B_T.shape[1]
    first_B = np.where(any_B, real_B_T.argmax(axis=1), 0)
    last_B = np.where(any_B, t - 1 - real_B_T[:, ::-1].argmax(axis=1), -1)
    return first_B.astype(np.int32), np.maximum(last_B - first_B + 1, 0).astype(np.int32)


def pack(tokens_B_T: np.ndarray, mask_B_T: np.ndarray, capacity: int, rows: int,
         pad_id: int = 0) -> Packed:
    """The B rows' spans packed into `rows` rows of `capacity` slots, first-fit by decreasing
    length (ties by row index, so the plan is a function of the lengths only). A span longer
    than `capacity`, or spans that do not fit in `rows` rows, raise ValueError: the caller
    sizes both (capacity >= T and rows = B always fit)."""
    tokens_B_T, mask_B_T = np.asarray(tokens_B_T), np.asarray(mask_B_T)
    b = tokens_B_T.shape[0]
    first_B, length_B = spans(mask_B_T)
    if length_B.max(initial=0) > capacity:
        raise ValueError(f"a sequence of {length_B.max()} tokens exceeds the packed row's "
                         f"{capacity} slots")
    free_K = np.full(rows, capacity, np.int64)
    row_B = np.full(b, -1, np.int32)
    start_B = np.zeros(b, np.int32)
    for i in sorted(range(b), key=lambda i: (-int(length_B[i]), i)):
        n = int(length_B[i])
        if n == 0:
            continue
        fits = np.nonzero(free_K >= n)[0]
        if not len(fits):
            raise ValueError(f"{int(length_B.sum())} tokens in {b} sequences do not fit "
                             f"{rows} packed rows of {capacity} slots")
        k = int(fits[0])
        row_B[i], start_B[i] = k, capacity - free_K[k]
        free_K[k] -= n
    tokens_K_C = np.full((rows, capacity), pad_id, np.int32)
    mask_K_C = np.zeros((rows, capacity), np.int32)
    segment_K_C = np.zeros((rows, capacity), np.int32)
    for i in np.nonzero(row_B >= 0)[0]:
        k, s, f, n = row_B[i], start_B[i], first_B[i], length_B[i]
        tokens_K_C[k, s:s + n] = tokens_B_T[i, f:f + n]
        mask_K_C[k, s:s + n] = mask_B_T[i, f:f + n]
        segment_K_C[k, s:s + n] = i + 1
    return Packed(tokens_K_C, mask_K_C, segment_K_C, row_B, start_B, first_B, length_B,
                  int((free_K < capacity).sum()))


def unpack_index(packed: Packed, t: int) -> np.ndarray:
    """int32 [B, T]: the flat packed slot (row x C + slot) of each unpacked slot inside its
    row's span, -1 outside it (padding; every slot of an empty sequence). Gathering a packed
    per-position output [K x C, ...] at these indices (masked where -1) gives the [B, T]
    layout."""
    c = packed.tokens_K_C.shape[1]
    col_T = np.arange(t)[None, :]
    offset_B_T = col_T - packed.first_B[:, None]
    inside_B_T = ((offset_B_T >= 0) & (offset_B_T < packed.length_B[:, None])
                  & (packed.row_B[:, None] >= 0))
    flat_B_T = packed.row_B[:, None] * c + packed.start_B[:, None] + offset_B_T
    return np.where(inside_B_T, flat_B_T, -1).astype(np.int32)
