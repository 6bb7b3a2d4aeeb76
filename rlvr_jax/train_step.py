"""Compiled update steps: `step(state, ...) -> (state, metrics)`, train state donated.

The forward runs over prompt ++ response (T = L + R); hidden states at slots L-1 .. T-2 predict the
response tokens at L .. T-1, so the response log-probs are aligned with the sampler's.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from rlvr_jax import lora, losses, optim, packing, sharding
from rlvr_jax.models import value as value_model
from rlvr_jax.models.policy import Decoder
from rlvr_jax.models.rope import positions_from_mask
from rlvr_jax.types import SFTBatch, TrainBatch, TrainState


class LossOptions(NamedTuple):
    """The policy loss's options (`losses.policy_gradient_loss`), built once from the config."""

    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_coef: float = 0.0  # 0: no reference forward
    kl_estimator: str = "k3"
    loss_agg: str = "token-mean"
    norm_tokens: int = 0  # seq-mean-token-sum-norm's constant divisor (the response budget)
    dual_clip_c: float = 0.0
    policy_loss: str = "clip"
    entropy_coef: float = 0.0
    # Off-policy correction (losses.behaviour_weights): none | token | sequence truncated
    # importance weights from the sampler to the proximal policy, capped at `is_cap`, with the
    # ratio clipped against the proximal policy (decoupled PPO).
    correction: str = "none"
    is_cap: float = 2.0
    is_bounds: tuple = (0.5, 2.0)  # the masked corrections' [low, high]
    objective_options: tuple = ()  # the objective's own options, (name, value) pairs


class CriticOptions(NamedTuple):
    """PPO's critic: `layout` separate (own trunk) | head (on the policy trunk)."""

    layout: str
    value_clip: float = 0.2
    vf_coef: float = 1.0


class Distill(NamedTuple):
    """On-policy distillation (rlvr_jax/distill.py): the frozen teacher's network, and how
    its per-token reverse KL enters: `reward` (coef x (log pi_teacher - log pi_sampler) added
    to each token's advantage) or `loss` (coef x agg of k2 to the teacher)."""

    model: Decoder
    mode: str = "reward"
    coef: float = 1.0


class UpdateSchedule(NamedTuple):
    """Optimizer updates per rollout: `epochs` x `minibatches` (a fresh random split each
    epoch), each minibatch's gradient accumulated over `microbatches` equal slices.

    `group_size` G > 1: the rows come in groups of G samples of one prompt (P_G order), which
    the splits keep whole (minibatches are random sets of groups, microbatch k takes groups k,
    k + M, ...), and each group's prompt is computed once in every forward
    (Decoder.response_hidden). 1: rows are split one by one and each computes its prompt."""

    epochs: int = 1
    minibatches: int = 1
    microbatches: int = 1
    group_size: int = 1
    # Packed (packing.py; 0: padded): each minibatch's rows packed into rows of
    # `pack_capacity` slots, with each unit's prompt once; the gradient accumulated over
    # microbatches of `pack_rows` packed rows, the empty ones skipped (`microbatches` unused).
    pack_rows: int = 0
    pack_capacity: int = 0
    # Rows per prompt in the batch (G, whatever the layout): the update's real tokens count
    # each prompt once in `update_positions_per_token`, so the layouts compare. 0: group_size.
    prompt_rows: int = 0


def response_logp(model: Decoder, params, tokens_B_T, input_mask_B_T, prompt_len: int,
                  temperature: float, with_hidden: bool = False, group_size: int = 1):
    """(logp_B_R, entropy_B_R) of the response tokens under softmax(logits / temperature); with
    `with_hidden`, also the trunk's hidden states at those positions [B, R, D] (for a value
    head). The head runs on the R positions that predict the response only (slots L-1 ..
    T-2), never the prompt's, in chunks of `model.cfg.logits_chunk_tokens` tokens
    (losses.chunked_logp_and_entropy). `group_size` G > 1: rows in groups of G sharing a prompt,
    computed once (Decoder.response_hidden)."""
    apply = lambda method, *a: model.apply({"params": params}, *a, method=method)
    hidden_B_R_D = apply("response_hidden", tokens_B_T, input_mask_B_T, prompt_len, group_size)
    logp_B_R, entropy_B_R = losses.chunked_logp_and_entropy(
        hidden_B_R_D, lambda h: apply("head", h), tokens_B_T[:, prompt_len:], temperature,
        model.cfg.logits_chunk_tokens)
    return (logp_B_R, entropy_B_R, hidden_B_R_D) if with_hidden else (logp_B_R, entropy_B_R)


LOSS_KEY_SALT = 0x10557  # folds the step's key into the objective's (apart from the splits')
FIRST_UPDATE = ("sampler_gap_mean", "sampler_gap_max")  # measured before any update moved


def _combine(metrics_U: dict, how: str, first: tuple = ()) -> dict:
    """Reduce stacked metrics over their leading axis: `first` keys take entry 0, `*_max` the
    max, others `how`."""
    red = {"sum": jnp.sum, "mean": jnp.mean}[how]
    return {k: (v[0] if k in first else jnp.max(v, axis=0) if k.endswith("_max")
                else red(v, axis=0)) for k, v in metrics_U.items()}


def make_rl_step(model: Decoder, tx, lr_schedule, *, prompt_len: int, temperature: float,
                 loss: LossOptions, critic: CriticOptions | None = None,
                 schedule: UpdateSchedule = UpdateSchedule(), state_sharding, metrics_sharding,
                 adapters: bool = False, distill: Distill | None = None,
                 on_trace: Callable[[], None] = lambda: None):
    """Jitted `step(state, ref_params, batch, key, actor_on[, teacher_params]) -> (state,
    metrics)`.

    One rollout batch of B sequences feeds `schedule.epochs` x `schedule.minibatches` optimizer
    updates (PPO's mu epochs; minibatches are a fresh random split each epoch, `key`), always
    against the sampler's log-probs. Each minibatch's gradient is accumulated over
    `schedule.microbatches` equal slices whose losses are divided by the counts of the whole
    minibatch, so the sum is the full-minibatch gradient. `critic` adds PPO's clipped value loss
    (times `vf_coef`) on params["value"]. `actor_on` (0. or 1.) gates the policy update, for
    critic warm-up. `ref_params` is unused when `loss.kl_coef == 0`. With `adapters` (LoRA),
    state.params["policy"] holds the adapters only and the policy is `ref_params` (the frozen
    base, also the KL reference with its adapters off) with them (lora.merge): gradients and
    optimizer state exist for the adapters alone. Metrics are means over the updates (maxima
    for `*_max`). `distill` adds a teacher (its params the step's last argument), scoring the
    sampled tokens in every update: see Distill."""
    if critic is not None and critic.layout not in ("separate", "head"):
        raise ValueError(f"unknown critic layout {critic.layout!r} (known: separate, head)")
    epochs, minibatches, microbatches, g = schedule[:4]
    pack_rows, capacity = schedule.pack_rows, schedule.pack_capacity
    prompt_rows = schedule.prompt_rows or g

    def loss_fn(params, ref_params, mb: TrainBatch, total: losses.Counts, actor_on, key,
                teacher_params, micro: packing.Micro | None = None):
        def rows_logp(net: Decoder, p):  # (logp_B_R, entropy_B_R, the trunk's hidden states)
            if micro is not None:
                return packing.logp(net, p, micro, temperature)
            return response_logp(net, p, mb.tokens_B_T, mb.input_mask_B_T, prompt_len,
                                 temperature, with_hidden=True, group_size=g)

        policy = (lora.merge(jax.lax.stop_gradient(ref_params), params["policy"]) if adapters
                  else params["policy"])
        logp_B_R, entropy_B_R, hidden = rows_logp(model, policy)
        ref_logp_B_R = None
        if loss.kl_coef > 0.0:
            ref_logp_B_R = rows_logp(model, jax.lax.stop_gradient(ref_params))[0]
        options = loss._asdict()
        correction, cap = options.pop("correction"), options.pop("is_cap")
        bounds = options.pop("is_bounds")
        decoupled, w_metrics = {}, {}
        if correction != "none":
            # The proximal policy: the step's starting params (filled before the updates when
            # there are several; with one update, these very params, without gradient).
            prox = (jax.lax.stop_gradient(logp_B_R) if mb.prox_logp_B_R is None
                    else mb.prox_logp_B_R)
            w_B_R, w_metrics = losses.behaviour_weights(prox, mb.old_logp_B_R,
                                                        mb.response_mask_B_R, cap, correction,
                                                        total, bounds)
            decoupled = {"prox_logp_B_R": prox, "is_weights_B_R": w_B_R}
        adv_B_R, d_metrics, teacher_logp_B_R = mb.advantages_B_R, {}, None
        if distill is not None:
            teacher_logp_B_R = rows_logp(distill.model,
                                         jax.lax.stop_gradient(teacher_params))[0]
            # The sampled tokens' reverse KL to the teacher (the student's own samples).
            kl_B_R = mb.old_logp_B_R - teacher_logp_B_R
            d_metrics = {"distill_reverse_kl": losses.aggregate(
                kl_B_R, mb.response_mask_B_R, "token-mean", total=total)}
            if distill.mode == "reward":
                adv_B_R = adv_B_R - distill.coef * kl_B_R * mb.response_mask_B_R
        total_loss, metrics = losses.policy_gradient_loss(
            logp_B_R, mb.old_logp_B_R, ref_logp_B_R, adv_B_R, mb.response_mask_B_R,
            entropy_B_R, **options, total=total, key=key, **decoupled)
        metrics = dict(metrics, **w_metrics, **d_metrics)
        if distill is not None and distill.mode == "loss":
            k2 = losses.aggregate(losses.kl_estimate(logp_B_R, teacher_logp_B_R, "k2"),
                                  mb.response_mask_B_R, loss.loss_agg, loss.norm_tokens, total)
            total_loss = total_loss + distill.coef * k2
            metrics["distill_k2"] = k2
        total_loss = actor_on * total_loss
        if critic is not None:
            shared = hidden if critic.layout == "head" else None
            if micro is not None:
                values_B_R = value_model.packed_values(model, params["value"], micro, shared)
            else:
                values_B_R = value_model.response_values(
                    model, params["value"], mb.tokens_B_T, mb.input_mask_B_T, prompt_len,
                    hidden_B_R_D=shared, group_size=g)
            v_loss, v_metrics = losses.value_loss(values_B_R, mb.old_values_B_R, mb.returns_B_R,
                                                  mb.response_mask_B_R, critic.value_clip, total)
            total_loss = total_loss + critic.vf_coef * v_loss
            metrics = dict(metrics, **v_metrics)
        return total_loss, dict(metrics, loss=total_loss)

    value_and_grad = jax.value_and_grad(loss_fn, has_aux=True)

    def grad_fn(*args):
        # Gradients placed as their params are (sharded under fsdp / model): left to
        # propagation, a stacked layer gradient could be held whole on every device.
        out, grads = value_and_grad(*args)
        return out, jax.lax.with_sharding_constraint(grads, state_sharding.params)

    def packed_micro(plan: packing.Plan, j, mb: TrainBatch, positions_B_T) -> packing.Micro:
        """Packed microbatch j of `mb`, its packed rows spread over the data axis."""
        return packed_rows_on(metrics_sharding.mesh)(packing.micro(
            plan, j, pack_rows, capacity, mb.tokens_B_T, mb.input_mask_B_T, positions_B_T))

    def packed_grads(state: TrainState, ref_params, mb: TrainBatch, total, actor_on, key,
                     teacher_params):
        """(grads, metrics) summed over the packed microbatches that hold rows (packing.py):
        microbatch j's loss is the minibatch's with the other rows' tokens masked, under the
        whole minibatch's counts, so the sum is the full-minibatch gradient."""
        b = mb.tokens_B_T.shape[0]
        plan = packing.plan(mb.input_mask_B_T, prompt_len, g, capacity)
        positions_B_T = positions_from_mask(mb.input_mask_B_T > 0)

        def one(j):
            micro = packed_micro(plan, j, mb, positions_B_T)
            mb_j = mb._replace(response_mask_B_R=mb.response_mask_B_R
                               * (micro.predictor_B_R >= 0))
            (_, m), grads = grad_fn(state.params, ref_params, mb_j, total, actor_on,
                                    jax.random.fold_in(key, j), teacher_params, micro)
            return grads, m

        empty = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(one, 0))

        def accumulate(grads, j):
            g_j, m = jax.lax.cond(j * pack_rows < plan.rows_used, one, lambda _: empty, j)
            return jax.tree.map(jnp.add, grads, g_j), m

        zeros = jax.tree.map(jnp.zeros_like, state.params)
        grads, metrics_U = jax.lax.scan(accumulate, zeros, jnp.arange(-(-b // pack_rows)))
        # The rows computed: every row of each microbatch that holds any.
        slots = -(-plan.rows_used // pack_rows) * pack_rows * capacity
        return grads, dict(_combine(metrics_U, "sum"), update_positions_per_token=(
            packing.positions_per_token(mb.input_mask_B_T, prompt_len, prompt_rows, slots)))

    def minibatch_update(state: TrainState, ref_params, mb: TrainBatch, actor_on, key,
                         teacher_params):
        total = losses.counts(mb.response_mask_B_R)
        if pack_rows:
            grads, metrics = packed_grads(state, ref_params, mb, total, actor_on, key,
                                          teacher_params)
        elif microbatches == 1:
            (_, metrics), grads = grad_fn(state.params, ref_params, mb, total, actor_on, key,
                                          teacher_params)
        else:
            # Microbatch k takes rows (groups) k, k + M, k + 2M, ...: each device holds a
            # contiguous block of rows, so every microbatch is spread over all of them.
            # Consecutive blocks put a whole microbatch on one device, and the scan then held
            # it on every device.
            micro = jax.tree.map(lambda x: strided(x, microbatches), mb)
            micro = jax.lax.with_sharding_constraint(
                micro, sharding.microbatch_sharding(metrics_sharding.mesh))

            def accumulate(grads, micro_k):
                micro_k, k = micro_k
                (_, m), g = grad_fn(state.params, ref_params, micro_k, total, actor_on,
                                    jax.random.fold_in(key, k), teacher_params)
                return jax.tree.map(jnp.add, grads, g), m

            zeros = jax.tree.map(jnp.zeros_like, state.params)
            grads, metrics_U = jax.lax.scan(accumulate, zeros,
                                            (micro, jnp.arange(microbatches)))
            metrics = _combine(metrics_U, "sum")
        if not pack_rows:
            b, t = mb.tokens_B_T.shape
            padded = (b // g * (prompt_len - 1) + b * (t - prompt_len + 1) if g > 1
                      else b * t)
            metrics["update_positions_per_token"] = packing.positions_per_token(
                mb.input_mask_B_T, prompt_len, prompt_rows, padded)
        gate = {part: actor_on if part == "policy" else 1.0 for part in state.params}
        state, opt_metrics = optim.apply_grads(state, grads, tx, lr_schedule, gate)
        return state, dict(metrics, **opt_metrics)

    def strided(x, n):
        """[B, ...] -> [n, B / n, ...]: slice k holds rows k, k + n, ... (groups of G rows
        k, k + n, ... when G > 1)."""
        return (x.reshape(-1, n, g, *x.shape[1:]).swapaxes(0, 1)
                .reshape(n, -1, *x.shape[1:]))

    def unstrided(x_n_b):
        return (x_n_b.reshape(x_n_b.shape[0], -1, g, *x_n_b.shape[2:]).swapaxes(0, 1)
                .reshape(-1, *x_n_b.shape[2:]))

    def proximal_logp(params, ref_params, batch: TrainBatch):
        """The policy's log-probs at these params over the whole batch, no gradient, in
        slices of one microbatch's rows (the update's own activation budget), strided as the
        microbatches are (slice k: rows k, k + n, ...), so each is spread over every device."""
        policy = (lora.merge(ref_params, params["policy"]) if adapters else params["policy"])
        if pack_rows:  # packed as the update is, its microbatches of packed rows in turn
            return jax.lax.stop_gradient(packed_proximal(policy, batch))
        n = minibatches * microbatches
        logp_n_b_R = jax.lax.map(lambda tm: response_logp(model, policy, tm[0], tm[1],
                                                          prompt_len, temperature,
                                                          group_size=g)[0],
                                 (strided(batch.tokens_B_T, n),
                                  strided(batch.input_mask_B_T, n)))
        return jax.lax.stop_gradient(unstrided(logp_n_b_R))

    def packed_proximal(policy, batch: TrainBatch):
        """`proximal_logp` over the whole batch packed (packing.over_batch): each token's
        log-prob from the one microbatch that holds it."""
        return packing.over_batch(
            lambda micro: (packing.logp(model, policy, micro, temperature)[0],),
            batch.input_mask_B_T, prompt_len, g, capacity, pack_rows, batch.tokens_B_T,
            positions_from_mask(batch.input_mask_B_T > 0),
            packed_rows_on(metrics_sharding.mesh))[0]

    def step(state: TrainState, ref_params, batch: TrainBatch, key, actor_on,
             teacher_params=None):
        on_trace()
        b = batch.tokens_B_T.shape[0]
        assert b % (g * minibatches * microbatches) == 0, (b, g, minibatches, microbatches)
        # The objective's draws (Clip-Cov): a key of their own, one per update.
        loss_key = jax.random.fold_in(key, LOSS_KEY_SALT)
        if epochs * minibatches == 1:
            return minibatch_update(state, ref_params, batch, actor_on,
                                    jax.random.fold_in(loss_key, 0), teacher_params)
        idx_U_b = update_rows(key, b, epochs, minibatches, g)

        def one_update(state, idx_b_u):
            idx_b, u = idx_b_u
            mb = batch if minibatches == 1 else jax.tree.map(lambda x: x[idx_b], batch)
            return minibatch_update(state, ref_params, mb, actor_on,
                                    jax.random.fold_in(loss_key, u), teacher_params)

        if loss.correction != "none":  # the proximal log-probs, before any update moves
            batch = batch._replace(prox_logp_B_R=proximal_logp(state.params, ref_params,
                                                                batch))
        state, metrics_U = jax.lax.scan(one_update, state,
                                        (idx_U_b, jnp.arange(idx_U_b.shape[0])))
        return state, _combine(metrics_U, "mean", first=FIRST_UPDATE)

    return jax.jit(step, donate_argnums=(0,), out_shardings=(state_sharding, metrics_sharding))


def packed_rows_on(mesh) -> Callable[[packing.Micro], packing.Micro]:
    """A packed microbatch's rows spread over `mesh`'s data axis (None: left to XLA)."""
    if mesh is None:
        return lambda micro: micro
    rows_sh = sharding.batch_sharding(mesh)
    return lambda micro: micro._replace(**{f: jax.lax.with_sharding_constraint(
        getattr(micro, f), rows_sh) for f in micro._fields[:5]})


def update_rows(key, rows: int, epochs: int, minibatches: int, group_size: int = 1):
    """int32 [epochs x minibatches, rows / minibatches]: the rows of each update. Each epoch a
    fresh permutation (of the rows, or of whole groups of `group_size` rows) from
    fold_in(key, epoch), cut into minibatches; with one minibatch, every row in order."""
    if minibatches == 1:
        return jnp.tile(jnp.arange(rows), (epochs, 1))
    n = rows // group_size
    perms = [jax.random.permutation(jax.random.fold_in(key, e), n) for e in range(epochs)]
    idx = jnp.concatenate(perms)
    if group_size > 1:
        idx = (idx[:, None] * group_size + jnp.arange(group_size)[None, :]).reshape(-1)
    return idx.reshape(epochs * minibatches, rows // minibatches)


def make_sft_step(model: Decoder, tx, lr_schedule, *, prompt_len: int, state_sharding,
                  metrics_sharding, on_trace: Callable[[], None] = lambda: None):
    """Jitted `step(state, batch) -> (state, metrics)`: NLL of the demonstration responses."""

    def loss_fn(params, batch: SFTBatch):
        logp_B_R, _ = response_logp(model, params, batch.tokens_B_T, batch.input_mask_B_T,
                                    prompt_len, 1.0)
        return losses.sft_loss(logp_B_R, batch.response_mask_B_R)

    return supervised_step(loss_fn, tx, lr_schedule, state_sharding, metrics_sharding,
                            on_trace)


def supervised_step(loss_fn, tx, lr_schedule, state_sharding, metrics_sharding, on_trace):
    """Jitted `step(state, batch) -> (state, metrics)`: one optimizer update on
    `loss_fn(params, batch) -> (loss, metrics)`. The train state (argument 0) is donated:
    params and optimizer moments are updated in place instead of held twice at the peak."""

    def step(state: TrainState, batch):
        on_trace()
        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch)
        state, opt_metrics = optim.apply_grads(state, grads, tx, lr_schedule)
        return state, dict(metrics, **opt_metrics)

    return jax.jit(step, donate_argnums=(0,), out_shardings=(state_sharding, metrics_sharding))
