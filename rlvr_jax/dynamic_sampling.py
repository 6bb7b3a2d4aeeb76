"""DAPO's dynamic sampling with static shapes (Yu et al. 2025, arXiv:2503.14476, sec. 3.2).

A group whose rewards are all equal has zero group-relative advantage: it costs a forward and
backward and teaches nothing. DAPO re-samples until the batch holds only informative groups,
which gives the update step a batch of varying size, or varying content of unknown size: a
recompile or a stall. Here every shape is fixed:

  * each step samples `sampled` prompts x G (a fixed over-sampled batch);
  * `select` fills exactly `keep` group slots: groups carried over from the previous step first
    (they are one policy update old; the ratio clipping covers that), then this step's
    informative groups; surplus informative groups (at most `capacity`) are carried to the next
    step, older carried groups that did not fit are dropped (never more than one step stale);
  * unfilled slots are padding: copies of real groups with a zero loss mask, so they add
    nothing to the loss or its normalisers (`losses.aggregate` skips empty sequences).

Everything here is host-side numpy; `f(carry, fresh) -> (carry, out)`.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from rlvr_jax.types import Groups


def concat(a: Groups, b: Groups) -> Groups:
    return Groups(*(None if x is None or y is None else np.concatenate([x, y])
                    for x, y in zip(a, b)))


def informative(groups: Groups) -> np.ndarray:
    """bool [P]: the group's returns are not all equal (its advantages are not all zero)."""
    r = groups.returns_P_G
    return r.max(axis=1) > r.min(axis=1)


def select(carry: Optional[Groups], fresh: Groups, keep: int,
           capacity: int) -> tuple[Groups, Optional[Groups], dict]:
    """(batch of exactly `keep` groups, new carry, stats). See the module docstring."""
    fresh_ok = np.flatnonzero(informative(fresh))
    n_carry = 0 if carry is None else carry.num
    use_carry = min(n_carry, keep)
    use_fresh = min(len(fresh_ok), keep - use_carry)
    parts = [fresh.take(fresh_ok[:use_fresh])]
    if use_carry:
        parts.insert(0, carry.take(np.arange(use_carry)))
    real = parts[0]
    for p in parts[1:]:
        real = concat(real, p)
    n_pad = keep - real.num
    if n_pad:
        # Copies of this step's groups with a zero loss mask: real tokens (no degenerate
        # all-pad rows in attention), zero weight.
        pad = fresh.take(np.arange(n_pad) % fresh.num)
        pad = pad._replace(loss_mask_P_G_R=np.zeros_like(pad.loss_mask_P_G_R))
        real = concat(real, pad)
    surplus = fresh_ok[use_fresh:][-capacity:] if capacity > 0 else fresh_ok[:0]
    new_carry = fresh.take(surplus) if len(surplus) else None
    stats = {
        "dynamic/informative_fraction": len(fresh_ok) / fresh.num,
        "dynamic/batch_fill": (keep - n_pad) / keep,  # kept share of the update batch
        "dynamic/real_groups": float(keep - n_pad),
        "dynamic/carried_in": float(use_carry),
        "dynamic/carried_out": float(0 if new_carry is None else new_carry.num),
        "dynamic/dropped_stale": float(n_carry - use_carry),
    }
    return real, new_carry, stats


def to_json(groups: Optional[Groups]) -> Optional[dict]:
    """Exact (float32 -> float64 -> float32 round-trips) JSON form for the checkpoint."""
    if groups is None:
        return None
    return {k: {"dtype": str(v.dtype), "shape": list(v.shape), "data": v.ravel().tolist()}
            for k, v in groups._asdict().items() if v is not None}


def from_json(obj: Optional[dict]) -> Optional[Groups]:
    if obj is None:
        return None
    arrays = {k: np.asarray(v["data"], dtype=v["dtype"]).reshape(v["shape"])
              for k, v in obj.items()}
    # A carry checkpointed before per-turn rewards existed had none: zeros are what it meant.
    arrays.setdefault("turn_rewards_P_G_R", np.zeros_like(arrays["loss_mask_P_G_R"]))
    return Groups(**arrays)
