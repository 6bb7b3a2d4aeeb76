"""The critic for PPO: a scalar value per response token, read from a decoder's final hidden
states by a linear head.

Two layouts (config `algo.ppo.critic`):
  separate  a value network of its own: a decoder trunk (initialised from the warm policy, as
            is usual for an RLHF critic) + head; params {"trunk": ..., "head": ...}
  head      a head on the policy's own trunk (one forward gives logits and values, the value
            loss also trains the shared trunk); params {"head": ...}

The value of response token t is read where the policy's logit for t is read (slot L-1+t: the
state before t is emitted), so values and log-probs align one to one.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from rlvr_jax import packing
from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder, Linear


class ValueHead(nn.Module):
    """hidden [..., D] -> value [...] (float32). Initialised to 0: the first advantages are
    the rewards themselves, not noise from a random head."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, hidden):
        v_proj = Linear(1, True, jnp.dtype(self.cfg.param_dtype), jnp.float32, 0.0, name="v_proj")
        return v_proj(hidden)[..., 0]


def init_head(cfg: ModelConfig, key: jax.Array) -> dict:
    return ValueHead(cfg).init(key, jnp.zeros((1, cfg.hidden_size), jnp.float32))["params"]


def init_critic(cfg: ModelConfig, layout: str, policy_params: dict, key: jax.Array) -> dict:
    """Critic params for `layout`; the separate trunk is a copy of `policy_params`."""
    head = init_head(cfg, key)
    if layout == "head":
        return {"head": head}
    if layout == "separate":
        return {"trunk": jax.tree.map(lambda x: x.copy(), policy_params), "head": head}
    raise ValueError(f"unknown critic layout {layout!r} (known: separate, head)")


def response_values(model: Decoder, critic: dict, tokens_B_T, input_mask_B_T, prompt_len: int,
                    hidden_B_R_D=None, group_size: int = 1):
    """values_B_R of the response tokens. `hidden_B_R_D`: the policy trunk's hidden states at
    the response-predicting slots (layout "head"); for a separate critic its own trunk is run
    here (`group_size`: Decoder.response_hidden's)."""
    if hidden_B_R_D is None:
        hidden_B_R_D = model.apply({"params": critic["trunk"]}, tokens_B_T, input_mask_B_T,
                                   prompt_len, group_size, method="response_hidden")
    return ValueHead(model.cfg).apply({"params": critic["head"]}, hidden_B_R_D)


def packed_values(model: Decoder, critic: dict, micro, hidden_K_C_D=None):
    """`response_values` over one packed microbatch (packing.py): the values at each response
    slot's predicting slot, [B, R] (zeros for the rows of other microbatches). `hidden_K_C_D`:
    the policy trunk's over the packed rows (layout "head")."""
    if hidden_K_C_D is None:
        hidden_K_C_D = model.apply({"params": critic["trunk"]}, *micro[:5],
                                   method="forward_packed")
    values_K_C = ValueHead(model.cfg).apply({"params": critic["head"]}, hidden_K_C_D)
    return packing.gather(values_K_C, micro.predictor_B_R)
