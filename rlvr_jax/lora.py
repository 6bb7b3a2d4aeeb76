"""LoRA's parameter bookkeeping (Hu et al. 2021, arXiv:2106.09685); the adapters' maths is
in models/policy.py's `Linear`.

A policy tree with adapters is the base tree plus `lora_a` / `lora_b` leaves beside the
targeted kernels. Training keeps them apart: the train state holds the adapters only (so do
the gradients and the optimizer), the base stays frozen outside it, and `merge` puts the two
back together for a forward (a dict union: no array is copied). The base alone, with the
adapters off, is the KL reference. `fold` writes the adapters into the kernels,
W + (alpha / r) A B, for export.

Why not qwix (Tunix's LoRA): it adds adapters by intercepting the matmuls of a flax module
as it is applied; our blocks run as stacked parameters under `lax.scan`, each applied as a
separate module, which it does not see. The bookkeeping here is ~50 lines of tree functions.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp

ADAPTERS = ("lora_a", "lora_b")


def split(params: Mapping) -> tuple[dict, dict]:
    """(base, adapters): the tree without its adapter leaves, and the adapter leaves alone
    (the same paths); subtrees left empty are dropped."""
    base, adapters = {}, {}
    for k, v in params.items():
        if isinstance(v, Mapping):
            b, a = split(v)
            if b:
                base[k] = b
            if a:
                adapters[k] = a
        elif k in ADAPTERS:
            adapters[k] = v
        else:
            base[k] = v
    return base, adapters


def merge(base: Mapping, adapters: Mapping) -> dict:
    """The union of two trees with disjoint leaves (`split`'s inverse)."""
    out = dict(base)
    for k, v in adapters.items():
        out[k] = merge(out.get(k, {}), v) if isinstance(v, Mapping) else v
    return out


def fold(params: Mapping, scale: float) -> dict:
    """The tree with every adapter pair folded into its kernel, kernel + scale * A @ B (in
    float32, cast back to the kernel's dtype), and no adapter leaves: what the adapted model
    computes, as plain weights (stacked layers included: A [..., in, r], B [..., r, out])."""
    out = {}
    for k, v in params.items():
        if k in ADAPTERS:
            continue
        if isinstance(v, Mapping):
            out[k] = fold(v, scale)
        elif k == "kernel" and "lora_a" in params:
            delta = jnp.matmul(jnp.asarray(params["lora_a"], jnp.float32),
                               jnp.asarray(params["lora_b"], jnp.float32))
            out[k] = (jnp.asarray(v, jnp.float32) + scale * delta).astype(v.dtype)
        else:
            out[k] = v
    return out


def count(params: Any) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(params))
