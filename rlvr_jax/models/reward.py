"""A reward model: a scalar head on a decoder trunk, read at each sequence's last real token
(as in InstructGPT's reward model, Ouyang et al. 2022, arXiv:2203.02155). Params
{"trunk": decoder params, "head": {"v_proj": ...}}; the trunk starts from a policy (the warm
one, or a Hugging Face checkpoint) and the head at 0.

Sequences are a left-padded prompt followed by a right-padded response (the sampler's layout),
so the last real token is the highest position whose mask is set.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder
from rlvr_jax.models.value import ValueHead, init_head


def init_reward_model(cfg: ModelConfig, trunk_params: dict, key: jax.Array) -> dict:
    """{"trunk": a copy of `trunk_params`, "head": a zero head}."""
    return {"trunk": jax.tree.map(lambda x: x.copy(), trunk_params), "head": init_head(cfg, key)}


def last_positions(mask_B_T: jax.Array) -> jax.Array:
    """Index of each row's last real token (0 for an empty row)."""
    t = mask_B_T.shape[1]
    return jnp.max(jnp.where(mask_B_T.astype(bool), jnp.arange(t)[None, :], 0), axis=1)


def scores(model: Decoder, params: dict, tokens_B_T: jax.Array, mask_B_T: jax.Array) -> jax.Array:
    """r_B: the head on the trunk's final hidden state at each row's last real token
    (float32)."""
    hidden_B_T_D = model.apply({"params": params["trunk"]}, tokens_B_T, mask_B_T,
                               method="forward")
    last_B = last_positions(mask_B_T)
    hidden_B_D = jnp.take_along_axis(hidden_B_T_D, last_B[:, None, None], axis=1)[:, 0]
    return ValueHead(model.cfg).apply({"params": params["head"]}, hidden_B_D)
