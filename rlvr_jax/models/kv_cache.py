"""The samplers' key/value cache, one buffer per layer.

A decode step reads every layer's weights and cached keys and values once. With the layers
stacked ([N, ...] arrays run by `lax.scan`, as training runs them) each scan iteration
sliced its layer out of the stack, and XLA copied each slice (the layer's weights and its
whole cache) before the layer's matmuls and attention read it: on an H200 at gsm8k_grpo's
shapes (Qwen2.5-0.5B, 256 rows, 256 + 512 tokens) those copies were 26% of the decode
loop's device time (a profile). So the samplers hold the cache as N arrays and their weights
as N per-layer trees (`decode_weights`), and the decode and extend steps run the N blocks
one after the other, each on its own buffers, each writing its new keys and values into its
buffer before attending over it (in place, no copy). The rollout there took 1.48 s against
2.80 s (experiments/bench/README.md).

Every leaf of a KVCache has its rows first, so a row update is one `jax.tree.map`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rlvr_jax.config import ModelConfig


class KVCache(NamedTuple):
    k_N_B_S_K_H: tuple[jax.Array, ...]  # N arrays [B, S, K, H], compute dtype: layer n's keys
    v_N_B_S_K_H: tuple[jax.Array, ...]  # values
    valid_B_S: jax.Array  # bool: slot holds a real (non-pad) token


def from_stacked(k_N_B_S_K_H: jax.Array, v_N_B_S_K_H: jax.Array, valid_B_S: jax.Array) -> KVCache:
    """A cache from stacked [N, B, S, K, H] keys and values (a prefill's scan output)."""
    split = lambda x: tuple(x[n] for n in range(x.shape[0]))
    return KVCache(split(k_N_B_S_K_H), split(v_N_B_S_K_H), valid_B_S)


def empty_cache(cfg: ModelConfig, rows: int, slots: int) -> KVCache:
    """`rows` rows of `slots` slots, nothing cached (every slot invalid)."""
    kv = lambda: tuple(jnp.zeros((rows, slots, cfg.num_kv_heads, cfg.resolved_head_dim),
                                 jnp.dtype(cfg.compute_dtype)) for _ in range(cfg.num_layers))
    return KVCache(kv(), kv(), jnp.zeros((rows, slots), bool))


def layers_of(stack, num_layers: int) -> tuple:
    """The block parameters as N per-layer trees: `stack` as it is when `decode_weights`
    already split it, else its layers sliced out (copies XLA may make at every use)."""
    if isinstance(stack, (tuple, list)):
        return tuple(stack)
    return tuple(jax.tree.map(lambda x: x[n], stack) for n in range(num_layers))


def decode_weights(params: dict, cfg: ModelConfig) -> dict:
    """The params as the samplers read them: floating leaves cast to the compute dtype (every
    use casts them to it anyway, so the model computes the same values, and a decode loop that
    reads the weights every step reads the compute dtype's bytes and converts nothing), and
    the layer stack split into N per-layer trees (the module doc: no slice copied per layer
    and step). The samplers call it once per call, before their loops. Costs one copy of the
    blocks' weights in the compute dtype for as long as the call runs."""
    dt = jnp.dtype(cfg.compute_dtype)
    cast = jax.tree.map(lambda x: x.astype(dt) if jnp.issubdtype(x.dtype, jnp.floating)
                        else x, params)
    return {**cast, "layers": layers_of(cast["layers"], cfg.num_layers)}
