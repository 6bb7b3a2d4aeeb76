"""Optimizers and the one way gradients become a new train state (`apply_grads`), shared by the
supervised warm start and the RL updates."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rlvr_jax.types import TrainState


class OptimizerSettings(NamedTuple):
    """AdamW behind global-norm clipping, with a learning-rate schedule (`lr_schedule`)."""

    learning_rate: float
    warmup_steps: int  # optimizer updates of linear warm-up
    total_steps: int  # optimizer updates in the run (cosine decays over them)
    schedule: str  # constant | cosine
    b1: float
    b2: float
    weight_decay: float
    max_grad_norm: float


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


def make_optimizer(s: OptimizerSettings):
    """(tx, lr schedule): AdamW behind global-norm clipping."""
    lr = lr_schedule(s.learning_rate, s.warmup_steps, s.total_steps, s.schedule)
    tx = optax.chain(optax.clip_by_global_norm(s.max_grad_norm),
                     optax.adamw(lr, b1=s.b1, b2=s.b2, weight_decay=s.weight_decay))
    return tx, lr


def make_rl_optimizer(actor: OptimizerSettings, critic: OptimizerSettings | None):
    """One optax transform over the RL params {"policy": ..., "value": ...}: each part gets its
    own optimizer (learning rate, clipping, moments), so a combined update is exactly a separate
    actor update and critic update. Returns (tx, actor lr schedule)."""
    actor_tx, actor_lr = make_optimizer(actor)
    parts = {"policy": actor_tx}
    if critic is not None:
        parts["value"] = make_optimizer(critic)[0]
    return optax.multi_transform(parts, lambda p: {k: k for k in p}), actor_lr


def init_train_state(params, tx) -> TrainState:
    """A fresh state owning a *copy* of `params`: the update steps donate the state, and callers
    usually keep `params` alive (as the frozen reference policy), which donation would delete."""
    params = jax.tree.map(lambda x: x.copy(), params)
    return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))


def apply_grads(state: TrainState, grads, tx, lr: Callable, gate: Any = None):
    """One optimizer update -> (state, {"grad_norm", "lr"}). `gate`: an optional pytree prefix of
    params holding multipliers of the updates (the RL step's {"policy": actor_on, "value": 1}
    holds the policy still during critic warm-up)."""
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    if gate is not None:
        updates = jax.tree.map(lambda g, sub: jax.tree.map(lambda u: u * g, sub), gate, updates)
    params = optax.apply_updates(state.params, updates)
    metrics = {"grad_norm": optax.tree.norm(grads), "lr": lr(state.step)}
    return TrainState(state.step + 1, params, opt_state), metrics
