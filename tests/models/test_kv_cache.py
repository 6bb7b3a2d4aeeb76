"""The samplers' cache and weights, one buffer per layer (models/kv_cache.py)."""

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax.config import ModelConfig
from rlvr_jax.models.kv_cache import decode_weights, empty_cache, from_stacked, layers_of
from rlvr_jax.models.policy import Decoder, init_params

CFG = ModelConfig(hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2,
                  intermediate_size=64, compute_dtype="bfloat16", param_dtype="float32")


def test_decode_weights_cast_and_split_the_stack_per_layer():
    params = jax.device_get(init_params(Decoder(CFG, 50), jax.random.key(0)))
    split = jax.device_get(jax.jit(lambda p: decode_weights(p, CFG))(params))
    assert isinstance(split["layers"], tuple) and len(split["layers"]) == 3
    for n, layer in enumerate(split["layers"]):
        jax.tree.map(lambda s, x: np.testing.assert_array_equal(
            s, x[n].astype(jnp.bfloat16)), layer, params["layers"])
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(split))
    assert layers_of(split["layers"], 3) == split["layers"]  # already split: as it is


def test_a_cache_is_a_buffer_per_layer_with_its_rows_first():
    cache = empty_cache(CFG, rows=5, slots=7)
    assert len(cache.k_N_B_S_K_H) == len(cache.v_N_B_S_K_H) == 3
    assert {x.shape for x in jax.tree.leaves(cache)} == {(5, 7, 2, 8), (5, 7)}
    assert all(x.shape[0] == 5 for x in jax.tree.leaves(cache))  # a row update: one tree.map
    assert not np.asarray(cache.valid_B_S).any()
    k = jnp.arange(3 * 2 * 4 * 2 * 8, dtype=jnp.float32).reshape(3, 2, 4, 2, 8)
    split = from_stacked(k, -k, jnp.ones((2, 4), bool))
    for n in range(3):
        np.testing.assert_array_equal(np.asarray(split.k_N_B_S_K_H[n]), np.asarray(k[n]))
        np.testing.assert_array_equal(np.asarray(split.v_N_B_S_K_H[n]), -np.asarray(k[n]))
