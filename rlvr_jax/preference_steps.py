"""The preference jobs' compiled steps (preference_runs.py): the reward model's
Bradley-Terry update, DPO's, and the sequence log-probs both sides of a pair need."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from rlvr_jax import preference
from rlvr_jax.models import reward as reward_model
from rlvr_jax.models.policy import Decoder
from rlvr_jax.train_step import response_logp, supervised_step
from rlvr_jax.types import PairBatch


def make_reward_model_step(model: Decoder, tx, lr_schedule, *, state_sharding, metrics_sharding,
                           margin: float = 0.0, label_smoothing: float = 0.0,
                           on_trace: Callable[[], None] = lambda: None):
    """Jitted `step(state, PairBatch) -> (state, metrics)`: the Bradley-Terry loss
    (preference.py) of the reward model (models/reward.py, params {"trunk", "head"}); chosen
    and rejected sides go through one forward."""

    def loss_fn(params, batch: PairBatch):
        b = batch.chosen_B_T.shape[0]
        r_2B = reward_model.scores(
            model, params, jnp.concatenate([batch.chosen_B_T, batch.rejected_B_T]),
            jnp.concatenate([batch.chosen_mask_B_T, batch.rejected_mask_B_T]))
        return preference.bradley_terry_loss(r_2B[:b], r_2B[b:], margin, label_smoothing)

    return supervised_step(loss_fn, tx, lr_schedule, state_sharding, metrics_sharding,
                            on_trace)


def sequence_logp(model: Decoder, params, tokens_B_T, mask_B_T, response_mask_B_R,
                  prompt_len: int) -> jax.Array:
    """log pi(response | prompt) per row: the sum of the response tokens' log-probs."""
    logp_B_R, _ = response_logp(model, params, tokens_B_T, mask_B_T, prompt_len, 1.0)
    return jnp.sum(logp_B_R * response_mask_B_R, axis=-1)


def pair_logp(model: Decoder, params, batch: PairBatch, prompt_len: int):
    """(log pi(chosen), log pi(rejected)) per pair, both sides through one forward."""
    b = batch.chosen_B_T.shape[0]
    logp_2B = sequence_logp(
        model, params, jnp.concatenate([batch.chosen_B_T, batch.rejected_B_T]),
        jnp.concatenate([batch.chosen_mask_B_T, batch.rejected_mask_B_T]),
        jnp.concatenate([batch.chosen_response_mask_B_R, batch.rejected_response_mask_B_R]),
        prompt_len)
    return logp_2B[:b], logp_2B[b:]


def make_with_reference_logp(model: Decoder, *, prompt_len: int,
                             on_trace: Callable[[], None] = lambda: None):
    """Jitted `(ref_params, PairBatch) -> PairBatch` carrying the reference's log-probs:
    computed once per pair, when its batch is drawn, not at every step that uses it."""

    def with_ref(ref_params, batch: PairBatch):
        on_trace()
        lc_B, lr_B = pair_logp(model, ref_params, batch, prompt_len)
        return batch._replace(ref_logp_chosen_B=lc_B, ref_logp_rejected_B=lr_B)

    return jax.jit(with_ref)


def make_dpo_step(model: Decoder, tx, lr_schedule, *, prompt_len: int, beta: float,
                  label_smoothing: float = 0.0, state_sharding, metrics_sharding,
                  on_trace: Callable[[], None] = lambda: None):
    """Jitted `step(state, PairBatch) -> (state, metrics)`: the DPO loss (preference.py) of
    the policy (state params {"policy": ...}, as an RL run's, so export and evaluation read
    it alike) against the reference log-probs the batch carries (make_with_reference_logp)."""

    def loss_fn(params, batch: PairBatch):
        lc_B, lr_B = pair_logp(model, params["policy"], batch, prompt_len)
        return preference.dpo_loss(lc_B, lr_B, batch.ref_logp_chosen_B,
                                   batch.ref_logp_rejected_B, beta, label_smoothing)

    return supervised_step(loss_fn, tx, lr_schedule, state_sharding, metrics_sharding,
                            on_trace)
