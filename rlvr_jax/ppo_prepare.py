"""PPO's preparation of a sampled batch, compiled: the critic's values at sampling time,
per-token rewards and GAE advantages and returns, before the update (train_step.py) trains
on them. Its forwards run as the update's do: each group's prompt once, and packed when the
update is (packing.over_batch)."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from rlvr_jax import advantages, losses, packing
from rlvr_jax.models import value as value_model
from rlvr_jax.models.policy import Decoder
from rlvr_jax.models.rope import positions_from_mask
from rlvr_jax.train_step import packed_rows_on, response_logp
from rlvr_jax.types import TrainBatch


def make_ppo_prepare(model: Decoder, *, prompt_len: int, temperature: float, critic_layout: str,
                     gamma: float, lam: float, whiten_advantages: bool, kl_in_reward: bool,
                     kl_estimator: str = "k1", group_size: int = 1, pack_rows: int = 0,
                     pack_capacity: int = 0, mesh=None,
                     on_trace: Callable[[], None] = lambda: None):
    """Jitted `prepare(params, ref_params, batch, outcome_B, turn_rewards_B_R, kl_coef) ->
    (batch, metrics)`: the critic's values at sampling time, per-token rewards (outcome on the
    last token, an environment's per-turn rewards at their own tokens, minus
    `kl_coef` x the per-token KL estimate to the reference when `kl_in_reward`), GAE(gamma,
    lam) advantages (whitened over the batch's valid tokens if asked) and return targets.
    `kl_coef` is traced, so an adaptive controller never recompiles. `group_size`: as
    UpdateSchedule's (each group's prompt computed once); `pack_rows` > 0: the forwards
    packed as the update is (packing.over_batch: microbatches of `pack_rows` rows of
    `pack_capacity` slots, on `mesh`'s data axis), else over the padded rows."""

    def padded(params, ref_params, batch: TrainBatch):
        hidden = None
        if critic_layout == "head":
            _, _, hidden = response_logp(model, params["policy"], batch.tokens_B_T,
                                         batch.input_mask_B_T, prompt_len, temperature, True,
                                         group_size)
        values_B_R = value_model.response_values(model, params["value"], batch.tokens_B_T,
                                                 batch.input_mask_B_T, prompt_len, hidden,
                                                 group_size)
        ref_logp_B_R = response_logp(model, ref_params, batch.tokens_B_T, batch.input_mask_B_T,
                                     prompt_len, temperature, group_size=group_size)[0] \
            if kl_in_reward else None
        return values_B_R, ref_logp_B_R

    def packed(params, ref_params, batch: TrainBatch):
        def per_micro(micro):
            hidden = (model.apply({"params": params["policy"]}, *micro[:5],
                                  method="forward_packed")  # the trunk only: no head
                      if critic_layout == "head" else None)
            values_B_R = value_model.packed_values(model, params["value"], micro, hidden)
            return (values_B_R,) + ((packing.logp(model, ref_params, micro, temperature)[0],)
                                    if kl_in_reward else ())

        got = packing.over_batch(per_micro, batch.input_mask_B_T, prompt_len, group_size,
                                 pack_capacity, pack_rows, batch.tokens_B_T,
                                 positions_from_mask(batch.input_mask_B_T > 0),
                                 packed_rows_on(mesh))
        return got[0], (got[1] if kl_in_reward else None)

    def prepare(params, ref_params, batch: TrainBatch, outcome_B, turn_rewards_B_R, kl_coef):
        on_trace()
        values_B_R, ref_logp_B_R = (packed if pack_rows else padded)(params, ref_params, batch)
        m = batch.response_mask_B_R
        values_B_R = values_B_R * m
        kl_B_R = None
        metrics = {}
        if kl_in_reward:
            kl_B_R = losses.kl_estimate(batch.old_logp_B_R, ref_logp_B_R, kl_estimator) * m
            metrics["kl_ref_per_seq"] = jnp.sum(kl_B_R) / losses.counts(m).num_seqs
        rewards_B_R = advantages.token_rewards(outcome_B, m, kl_B_R, kl_coef, turn_rewards_B_R)
        adv_B_R, returns_B_R = advantages.gae(rewards_B_R, values_B_R, m, gamma, lam)
        if whiten_advantages:
            adv_B_R = advantages.whiten(adv_B_R, m)
        resid = losses.masked_mean(jnp.square(returns_B_R - values_B_R), m)
        var = losses.masked_mean(jnp.square(returns_B_R - losses.masked_mean(returns_B_R, m)), m)
        metrics |= {"values_mean": losses.masked_mean(values_B_R, m),
                    "returns_mean": losses.masked_mean(returns_B_R, m),
                    "explained_variance": 1.0 - resid / jnp.maximum(var, 1e-8)}
        batch = batch._replace(advantages_B_R=adv_B_R, returns_B_R=returns_B_R,
                               old_values_B_R=values_B_R)
        return batch, metrics

    return jax.jit(prepare)
