"""Compiled update steps: `step(state, ...) -> (state, metrics)`, train state donated.

The forward runs over prompt ++ response (T = P + N); logits at slots P-1 .. T-2 predict the
response tokens at P .. T-1, so the response log-probs are aligned with the sampler's.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

from rlvr_jax import advantages, losses
from rlvr_jax.models import value as value_model
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


def make_rl_optimizer(actor: dict, critic: dict | None):
    """One optax transform over the RL params {"policy": ..., "value": ...}: each part gets its
    own `make_optimizer(**settings)` (learning rate, clipping, moments), so a combined update
    is exactly a separate actor update and critic update. Returns (tx, actor lr schedule)."""
    actor_tx, actor_lr = make_optimizer(**actor)
    if critic is None:
        return optax.multi_transform({"policy": actor_tx}, lambda p: {k: k for k in p}), actor_lr
    critic_tx, _ = make_optimizer(**critic)
    return optax.multi_transform({"policy": actor_tx, "value": critic_tx},
                                 lambda p: {k: k for k in p}), actor_lr


def response_logp(model: Decoder, params, tokens_B_T, input_mask_B_T, prompt_len: int,
                  temperature: float, with_hidden: bool = False):
    """(logp_B_N, entropy_B_N) of the response tokens under softmax(logits / temperature); with
    `with_hidden`, also the trunk's hidden states [B, T, D] (for a value head). The head runs on
    the N positions that predict the response only (slots P-1 .. T-2), never the prompt's."""
    apply = lambda method, *a: model.apply({"params": params}, *a, method=method)
    hidden_B_T_D = apply("forward", tokens_B_T, input_mask_B_T)
    logits_B_N_V = apply("head", hidden_B_T_D[:, prompt_len - 1: -1])
    logp_B_N, entropy_B_N = losses.token_logp_and_entropy(logits_B_N_V, tokens_B_T[:, prompt_len:],
                                                          temperature)
    return (logp_B_N, entropy_B_N, hidden_B_T_D) if with_hidden else (logp_B_N, entropy_B_N)


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


def _combine(metrics_K: dict, how: str) -> dict:
    """Reduce stacked metrics over their leading axis: `*_max` by max, others by `how`."""
    red = {"sum": jnp.sum, "mean": jnp.mean}[how]
    return {k: (jnp.max(v, axis=0) if k.endswith("_max") else red(v, axis=0))
            for k, v in metrics_K.items()}


def make_rl_step(model: Decoder, tx, lr_schedule, *, prompt_len: int, temperature: float,
                 eps_low: float, eps_high: float, kl_coef: float, state_sharding,
                 metrics_sharding, kl_estimator: str = "k3", loss_agg: str = "token-mean",
                 norm_tokens: int = 0, dual_clip_c: float = 0.0, policy_loss: str = "clip",
                 entropy_coef: float = 0.0, critic: str | None = None, value_clip: float = 0.2,
                 vf_coef: float = 1.0, epochs: int = 1, minibatches: int = 1,
                 microbatches: int = 1, on_trace: Callable[[], None] = lambda: None):
    """Jitted `step(state, ref_params, batch, key, actor_on) -> (state, metrics)`.

    One rollout batch of B sequences feeds `epochs` x `minibatches` optimizer updates (PPO's
    mu epochs; minibatches are a fresh random split each epoch, `key`), always against the
    sampler's log-probs. Each minibatch's gradient is accumulated over `microbatches` equal
    slices whose losses are divided by the counts of the whole minibatch, so the sum is the
    full-minibatch gradient. `critic` ("separate" | "head" | None) adds PPO's clipped value
    loss (times `vf_coef`) on params["value"]. `actor_on` (0. or 1.) gates the policy update,
    for critic warm-up. `ref_params` is unused when `kl_coef == 0`. Metrics are means over the
    updates (maxima for `*_max`). The loss options are those of `losses.grpo_loss`."""
    if critic not in (None, "separate", "head"):
        raise ValueError(f"unknown critic layout {critic!r} (known: separate, head)")

    def loss_fn(params, ref_params, mb: TrainBatch, total: losses.Counts, actor_on):
        logp_B_N, entropy_B_N, hidden = response_logp(
            model, params["policy"], mb.tokens_B_T, mb.input_mask_B_T, prompt_len, temperature,
            with_hidden=True)
        ref_logp_B_N = None
        if kl_coef > 0.0:
            ref_logp_B_N, _ = response_logp(model, jax.lax.stop_gradient(ref_params),
                                            mb.tokens_B_T, mb.input_mask_B_T, prompt_len,
                                            temperature)
        loss, metrics = losses.grpo_loss(
            logp_B_N, mb.old_logp_B_N, ref_logp_B_N, mb.advantages_B_N, mb.response_mask_B_N,
            entropy_B_N, eps_low=eps_low, eps_high=eps_high, kl_coef=kl_coef,
            kl_estimator=kl_estimator, loss_agg=loss_agg, norm_tokens=norm_tokens,
            dual_clip_c=dual_clip_c, policy_loss=policy_loss, entropy_coef=entropy_coef,
            total=total)
        loss = actor_on * loss
        if critic is not None:
            values_B_N = value_model.response_values(
                model, params["value"], mb.tokens_B_T, mb.input_mask_B_T, prompt_len,
                hidden_B_T_D=hidden if critic == "head" else None)
            v_loss, v_metrics = losses.value_loss(values_B_N, mb.old_values_B_N, mb.returns_B_N,
                                                  mb.response_mask_B_N, value_clip, total)
            loss = loss + vf_coef * v_loss
            metrics = dict(metrics, **v_metrics)
        return loss, dict(metrics, loss=loss)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def minibatch_update(state: TrainState, ref_params, mb: TrainBatch, actor_on):
        total = losses.counts(mb.response_mask_B_N)
        if microbatches == 1:
            (_, metrics), grads = grad_fn(state.params, ref_params, mb, total, actor_on)
        else:
            micro = jax.tree.map(lambda x: x.reshape(microbatches, -1, *x.shape[1:]), mb)

            def accumulate(grads, micro_k):
                (_, m), g = grad_fn(state.params, ref_params, micro_k, total, actor_on)
                return jax.tree.map(jnp.add, grads, g), m

            zeros = jax.tree.map(jnp.zeros_like, state.params)
            grads, metrics_K = jax.lax.scan(accumulate, zeros, micro)
            metrics = _combine(metrics_K, "sum")
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        updates = dict(updates, policy=jax.tree.map(lambda u: u * actor_on, updates["policy"]))
        params = optax.apply_updates(state.params, updates)
        metrics = dict(metrics, grad_norm=optax.tree.norm(grads), lr=lr_schedule(state.step))
        return TrainState(state.step + 1, params, opt_state), metrics

    def step(state: TrainState, ref_params, batch: TrainBatch, key, actor_on):
        on_trace()
        b = batch.tokens_B_T.shape[0]
        assert b % (minibatches * microbatches) == 0, (b, minibatches, microbatches)
        if epochs * minibatches == 1:
            return minibatch_update(state, ref_params, batch, actor_on)
        # Row indices of each update: a fresh permutation per epoch, cut into minibatches.
        if minibatches == 1:
            idx_U_b = jnp.tile(jnp.arange(b), (epochs, 1))
        else:
            perms = [jax.random.permutation(jax.random.fold_in(key, e), b) for e in range(epochs)]
            idx_U_b = jnp.concatenate(perms).reshape(epochs * minibatches, b // minibatches)

        def one_update(state, idx_b):
            mb = batch if minibatches == 1 else jax.tree.map(lambda x: x[idx_b], batch)
            return minibatch_update(state, ref_params, mb, actor_on)

        state, metrics_U = jax.lax.scan(one_update, state, idx_U_b)
        return state, _combine(metrics_U, "mean")

    return jax.jit(step, donate_argnums=(0,), out_shardings=(state_sharding, metrics_sharding))


def make_ppo_prepare(model: Decoder, *, prompt_len: int, temperature: float, critic: str,
                     gamma: float, lam: float, whiten_advantages: bool, kl_in_reward: bool,
                     kl_estimator: str = "k1", on_trace: Callable[[], None] = lambda: None):
    """Jitted `prepare(params, ref_params, batch, outcome_B, kl_coef) -> (batch, metrics)`:
    the critic's values at sampling time, per-token rewards (outcome on the last token, minus
    `kl_coef` x the per-token KL estimate to the reference when `kl_in_reward`), GAE(gamma,
    lam) advantages (whitened over the batch's valid tokens if asked) and return targets.
    `kl_coef` is traced, so an adaptive controller never recompiles."""

    def prepare(params, ref_params, batch: TrainBatch, outcome_B, kl_coef):
        on_trace()
        hidden = None
        if critic == "head":
            _, _, hidden = response_logp(model, params["policy"], batch.tokens_B_T,
                                         batch.input_mask_B_T, prompt_len, temperature, True)
        values_B_N = value_model.response_values(model, params["value"], batch.tokens_B_T,
                                                 batch.input_mask_B_T, prompt_len, hidden)
        m = batch.response_mask_B_N
        values_B_N = values_B_N * m
        kl_B_N = None
        metrics = {}
        if kl_in_reward:
            ref_logp_B_N, _ = response_logp(model, ref_params, batch.tokens_B_T,
                                            batch.input_mask_B_T, prompt_len, temperature)
            kl_B_N = losses.kl_estimate(batch.old_logp_B_N, ref_logp_B_N, kl_estimator) * m
            metrics["kl_ref_per_seq"] = jnp.sum(kl_B_N) / losses.counts(m).num_seqs
        rewards_B_N = advantages.token_rewards(outcome_B, m, kl_B_N, kl_coef)
        adv_B_N, returns_B_N = advantages.gae(rewards_B_N, values_B_N, m, gamma, lam)
        if whiten_advantages:
            adv_B_N = advantages.whiten(adv_B_N, m)
        resid = losses.masked_mean(jnp.square(returns_B_N - values_B_N), m)
        var = losses.masked_mean(jnp.square(returns_B_N - losses.masked_mean(returns_B_N, m)), m)
        metrics |= {"values_mean": losses.masked_mean(values_B_N, m),
                    "returns_mean": losses.masked_mean(returns_B_N, m),
                    "explained_variance": 1.0 - resid / jnp.maximum(var, 1e-8)}
        batch = batch._replace(advantages_B_N=adv_B_N, returns_B_N=returns_B_N,
                               old_values_B_N=values_B_N)
        return batch, metrics

    return jax.jit(prepare)


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
