"""Compiled update steps: `step(state, ...) -> (state, metrics)`, train state donated.

The forward runs over prompt ++ response (T = P + N); logits at slots P-1 .. T-2 predict the
response tokens at P .. T-1, so the response log-probs are aligned with the sampler's.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from rlvr_jax import losses
from rlvr_jax.models.policy import Decoder
from rlvr_jax.types import SFTBatch, TrainBatch, TrainState


def lr_schedule(peak: float, warmup_steps: int, total_steps: int, kind: str):
    """Linear warm-up from peak / warmup_steps (step 0 already learns) to `peak` at
    `warmup_steps`, then constant, or cosine decay to 0.1 * peak at `total_steps`."""
    if kind == "cosine":
        after = optax.cosine_decay_schedule(peak, max(total_steps - warmup_steps, 1), alpha=0.1)
    else:
        after = optax.constant_schedule(peak)
    if warmup_steps <= 0:
        return after
    warm = optax.linear_schedule(peak / warmup_steps, peak, warmup_steps)
    return optax.join_schedules([warm, after], [warmup_steps])


def make_optimizer(*, learning_rate: float, warmup_steps: int, total_steps: int, schedule: str,
                   b1: float, b2: float, weight_decay: float, max_grad_norm: float):
    """AdamW behind global-norm clipping; linear warm-up then constant or cosine (to 10%)."""
    lr = lr_schedule(learning_rate, warmup_steps, total_steps, schedule)
    tx = optax.chain(optax.clip_by_global_norm(max_grad_norm),
                     optax.adamw(lr, b1=b1, b2=b2, weight_decay=weight_decay))
    return tx, lr


def response_logp(model: Decoder, params, tokens_B_T, input_mask_B_T, prompt_len: int,
                  temperature: float):
    """(logp_B_N, entropy_B_N) of the response tokens under softmax(logits / temperature)."""
    logits_B_T_V, _ = model.apply({"params": params}, tokens_B_T, input_mask_B_T)
    logits_B_N_V = logits_B_T_V[:, prompt_len - 1: -1]
    return losses.token_logp_and_entropy(logits_B_N_V, tokens_B_T[:, prompt_len:], temperature)


def _jit_update(loss_fn: Callable, tx, lr_schedule, state_sharding, metrics_sharding,
                on_trace: Callable[[], None]):
    """Wrap `loss_fn(params, *args) -> (loss, metrics)` into a jitted, donating update step."""

    def step(state: TrainState, *args):
        on_trace()
        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, *args)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = dict(metrics, grad_norm=optax.tree.norm(grads), lr=lr_schedule(state.step))
        return TrainState(state.step + 1, params, opt_state), metrics

    # Donate the train state (argument 0): params and optimizer moments are updated in place
    # instead of holding two copies at the peak.
    return jax.jit(step, donate_argnums=(0,), out_shardings=(state_sharding, metrics_sharding))


def make_grpo_step(model: Decoder, tx, lr_schedule, *, prompt_len: int, temperature: float,
                   eps_low: float, eps_high: float, kl_coef: float, state_sharding,
                   metrics_sharding, kl_estimator: str = "k3", loss_agg: str = "token-mean",
                   norm_tokens: int = 0, dual_clip_c: float = 0.0, policy_loss: str = "clip",
                   on_trace: Callable[[], None] = lambda: None):
    """Jitted `step(state, ref_params, batch) -> (state, metrics)`; ref_params unused if beta=0.
    The loss options are those of `losses.grpo_loss`."""

    def loss_fn(params, ref_params, batch: TrainBatch):
        logp_B_N, entropy_B_N = response_logp(model, params, batch.tokens_B_T,
                                              batch.input_mask_B_T, prompt_len, temperature)
        ref_logp_B_N = None
        if kl_coef > 0.0:
            ref_logp_B_N, _ = response_logp(model, jax.lax.stop_gradient(ref_params),
                                            batch.tokens_B_T, batch.input_mask_B_T, prompt_len,
                                            temperature)
        return losses.grpo_loss(logp_B_N, batch.old_logp_B_N, ref_logp_B_N, batch.advantages_B,
                                batch.response_mask_B_N, entropy_B_N, eps_low=eps_low,
                                eps_high=eps_high, kl_coef=kl_coef, kl_estimator=kl_estimator,
                                loss_agg=loss_agg, norm_tokens=norm_tokens,
                                dual_clip_c=dual_clip_c, policy_loss=policy_loss)

    return _jit_update(loss_fn, tx, lr_schedule, state_sharding, metrics_sharding, on_trace)


def make_sft_step(model: Decoder, tx, lr_schedule, *, prompt_len: int, state_sharding,
                  metrics_sharding, on_trace: Callable[[], None] = lambda: None):
    """Jitted `step(state, batch) -> (state, metrics)`: NLL of the demonstration responses."""

    def loss_fn(params, batch: SFTBatch):
        logp_B_N, _ = response_logp(model, params, batch.tokens_B_T, batch.input_mask_B_T,
                                    prompt_len, 1.0)
        return losses.sft_loss(logp_B_N, batch.response_mask_B_N)

    return _jit_update(loss_fn, tx, lr_schedule, state_sharding, metrics_sharding, on_trace)


def init_train_state(params, tx) -> TrainState:
    """A fresh state owning a *copy* of `params`: the update steps donate the state, and callers
    usually keep `params` alive (as the frozen reference policy), which donation would delete."""
    params = jax.tree.map(lambda x: x.copy(), params)
    return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))
