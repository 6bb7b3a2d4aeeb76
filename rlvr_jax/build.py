"""Builders: the config's parts -> the run's pieces, each a small record of plain values and
jitted functions. The one place the config is unpacked (with loop.py, which reads its own
knobs); nothing here mutates the config.

    setup   = build.run_task_setup(cfg)    # or task_setup(cfg.task, cfg.model, ...)
    policy  = build.policy(setup, cfg.mesh, cfg.sampling, traces)
    warmup  = build.warmup(policy, setup, cfg.warmup, traces)     # every job's warm start
    updates = build.updates(policy, setup, cfg.algo, cfg.sampling.temperature, ...)  # RL only
"""

from __future__ import annotations

import collections
import os
import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Callable, NamedTuple, Optional, Sequence

import jax
from transformers import PreTrainedTokenizerBase

import jax.numpy as jnp

from rlvr_jax import (distributed, envs, episodes, generate, lora, optim, sharding, streaming,
                      tasks, train_step)
from rlvr_jax.envs import chat
from rlvr_jax.config import (AlgoConfig, ConfigError, EnvConfig, MeshConfig, ModelConfig,
                             RunConfig, SamplingConfig, StreamConfig, WarmupConfig)
from rlvr_jax.models import hf
from rlvr_jax.models import value as value_model
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.sampling import make_sampler
from rlvr_jax.continuous import make_continuous_sampler
from rlvr_jax.ppo_prepare import make_ppo_prepare
from rlvr_jax.rollouts import copy_policy
from rlvr_jax.turn_sampler import make_turn_sampler
from rlvr_jax.tasks import registry as task_registry
from rlvr_jax.tasks.base import Task
from rlvr_jax.tokenizer import load_pretrained_tokenizer, load_tokenizer, save_char_tokenizer

Traces = collections.Counter  # jitted function name -> times traced (= compiled)


def counter(traces: Traces, name: str) -> Callable[[], None]:
    return lambda: traces.update([name])


# ------------------------------------------------------------------ task + tokenizer
@dataclass(frozen=True)
class TaskSetup:
    tokenizer: PreTrainedTokenizerBase
    task: Task
    model_cfg: ModelConfig  # resolved: read from model.path's config.json when set
    vocab_size: int
    prompt_len: int  # prompt slots (left-padded): the task's longest prompt (else the sets')
    max_new_tokens: int  # response slots
    # (name, task, verifier kind, prompt slots) of each extra held-out set: its own slots, so
    # a set of long prompts never widens the training step's shapes
    eval_sets: tuple = ()


def task_setup(task_cfg, model_cfg: ModelConfig, max_new_tokens: int,
               tokenizer_dir: str, eval_sets: Sequence[str] = (),
               eval_problems: int = 10**9) -> TaskSetup:
    """The tokenizer (a HF directory's own, or our character tokenizer saved in
    `tokenizer_dir`), the task, the extra held-out sets (`eval.extra_sets`, of which the first
    `eval_problems` are evaluated, each with the prompt slots its own prompts need), and the
    sizes they fix."""
    if model_cfg.path:
        if not os.path.isdir(model_cfg.path):
            raise hf.HFImportError(f"model.path={model_cfg.path}: does not exist (a local "
                                   "Hugging Face directory: config.json, safetensors, tokenizer)")
        tokenizer = load_pretrained_tokenizer(model_cfg.path)
        model_cfg = hf.read_config(model_cfg.path, model_cfg)
    else:
        if not os.path.exists(os.path.join(tokenizer_dir, "tokenizer.json")):
            save_char_tokenizer(tokenizer_dir)
        tokenizer = load_tokenizer(tokenizer_dir)
    task = tasks.build(task_cfg, tokenizer) if task_cfg is not None else None  # None: sets only
    count = lambda text: len(tokenizer.encode(text, add_special_tokens=False))
    sets = []
    for name in eval_sets:
        spec = task_registry.eval_sets()[name]
        built = spec.build(tokenizer)
        longest = max(count(built.prompt(p)) for p in built.heldout_set(eval_problems))
        sets.append((name, built, spec.verifier, longest))
    prompt_len = (task.prompt_budget(count) if task is not None
                  else max(length for *_, length in sets))
    return TaskSetup(tokenizer, task, model_cfg, model_cfg.vocab_size or len(tokenizer),
                     prompt_len, max_new_tokens, tuple(sets))


def run_task_setup(cfg: RunConfig) -> TaskSetup:
    """`task_setup` for a run: the writer process saves the tokenizer in the run directory,
    the others read it back after a barrier."""
    setup = partial(task_setup, cfg.task, cfg.model, cfg.sampling.max_new_tokens,
                    os.path.join(cfg.run_dir, "tokenizer"),
                    cfg.eval.extra_sets if cfg.eval.num_problems else (),  # 0: no evaluation
                    cfg.eval.extra_problems or 10**9)
    mine = setup() if distributed.is_writer() else None
    distributed.barrier("task_setup")  # the writer has saved the tokenizer the others read
    return mine or setup()


# ------------------------------------------------------------------ policy + samplers
@dataclass(frozen=True)
class Policy:
    model: Decoder
    mesh: jax.sharding.Mesh
    put: Callable  # host array (pytree) -> device, batch-sharded
    shardings: Callable  # abstract (params / train state) tree -> its NamedShardings
    init_params: Callable  # key -> params (the base: no LoRA adapters), created already sharded
    sample_train: Callable  # jitted (params, prompt_B_L, mask_B_L, key, rows_B) -> Rollout
    sample_greedy: Callable  # temperature 0 (evaluation only)
    sample_eval: Callable  # temperature 1, no truncation (evaluation)
    group_size: int = 1  # the train samplers' rows come in groups of this many (one prefill)


def policy(setup: TaskSetup, mesh_cfg: MeshConfig, sampling: SamplingConfig,
           traces: Traces, group_size: int = 1, devices=None) -> Policy:
    """`group_size`: the RL step's samples per prompt (its batches are P_G: each prompt is
    prefilled once by the train samplers; evaluation's samplers prefill every row).
    `devices`: the mesh's (default: all)."""
    model = Decoder(setup.model_cfg, setup.vocab_size)
    mesh = sharding.make_mesh(mesh_cfg.data, mesh_cfg.fsdp, mesh_cfg.model, devices)
    batch_sh = sharding.batch_sharding(mesh)
    shardings = partial(sharding.state_shardings, mesh=mesh)
    base_init = lambda key: lora.split(init_params(model, key))[0]
    abstract_params = jax.eval_shape(base_init, jax.random.key(0))
    # Params are created already sharded: no host-side full copy, no resharding afterwards.
    init = jax.jit(base_init, out_shardings=shardings(abstract_params))
    sampler = partial(make_sampler, model, max_new_tokens=setup.max_new_tokens,
                      eos_id=setup.tokenizer.eos_token_id, pad_id=setup.tokenizer.pad_token_id,
                      phases=sampling.decode_phases)
    return Policy(
        model=model, mesh=mesh, put=lambda x: jax.device_put(x, batch_sh), shardings=shardings,
        init_params=init,
        sample_train=sampler(temperature=sampling.temperature, top_k=sampling.top_k,
                             top_p=sampling.top_p, group_size=group_size,
                             on_trace=counter(traces, "sampler")),
        sample_greedy=sampler(temperature=0.0, on_trace=counter(traces, "sampler_eval_greedy")),
        sample_eval=sampler(temperature=1.0, on_trace=counter(traces, "sampler_eval_sampled")),
        group_size=group_size)


def split_devices(sampler_devices: int) -> tuple[list, Optional[list]]:
    """(the trainer's devices, the sampler's or None) for `rollout.sampler_devices` N: the
    last N of each process's devices sample, the rest train (0: None, all train and sample).
    Each process keeps devices on both sides, so each runs both programs on its own."""
    if not sampler_devices:
        return jax.devices(), None
    train, sample = [], []
    for p in range(jax.process_count()):
        mine = [d for d in jax.devices() if d.process_index == p]
        if sampler_devices >= len(mine):
            raise ConfigError(f"config key 'rollout.sampler_devices': {sampler_devices} of "
                              f"process {p}'s {len(mine)} devices leaves none to train on")
        train += mine[:-sampler_devices]
        sample += mine[-sampler_devices:]
    return train, sample


def sampler_placement(trainer: Policy, sampler: Policy, ref_params):
    """-> (place, snapshot, ref): `place(state params)` is the policy's trained tree where the
    sampler runs, `snapshot` a copy of it the sampler owns (asynchronous rollouts: the update
    donates the state's buffers), `ref` the reference params there (LoRA's frozen base). On
    shared devices the snapshot is a copy on them; on the sampler's own devices, the transfer
    is the copy."""
    if sampler is trainer:
        return (lambda p: {"policy": p["policy"]}), copy_policy, ref_params

    def place(params):
        tree = {"policy": params["policy"]}
        return jax.device_put(tree, sampler.shardings(tree))

    return place, place, jax.device_put(ref_params, sampler.shardings(ref_params))


class ExtraSet(NamedTuple):
    """An extra held-out set (`eval.extra_sets`) as evaluations run it."""

    name: str
    task: Task
    verifier: object  # made with the run's verifier settings; the caller closes it
    setup: "TaskSetup"  # the run's, with the set's own prompt slots
    generators: "Generators"  # evaluation-only samplers of those shapes (compiled on use)


def extra_sets(setup: TaskSetup, v, generators_for: Callable[["TaskSetup", str], "Generators"],
               fleet=None) -> list[ExtraSet]:
    """Each extra held-out set with its verifier (made with the run's verifier settings
    `v`, on the run's Ray `fleet` if it has one) and its own samplers, `generators_for(setup
    with the set's prompt slots, name)`. The caller closes the verifiers."""
    from rlvr_jax.verify.verifiers import make_verifier

    out = []
    for name, task, kind, prompt_len in setup.eval_sets:
        own = dataclasses.replace(setup, prompt_len=prompt_len)
        out.append(ExtraSet(name, task, make_verifier(
            kind, workers=v.workers, timeout_s=v.timeout_s, batch_timeout_s=v.batch_timeout_s,
            mode=v.mode, fleet=fleet), own, generators_for(own, name)))
    return out


# ------------------------------------------------------------------ environment + generators
def environment(e: EnvConfig, fleet=None):
    """The multi-turn environment of `env` (tools in the sandbox, their own worker pool), or
    None for one turn; `fleet`: stateful kinds' sessions on a Ray cluster (env.backend=ray).
    The caller closes it."""
    from rlvr_jax.envs import registry

    if e.kind == "none":
        return None
    if e.kind == "routed":  # each row's own environment (envs/routed.py)
        from rlvr_jax.envs.routed import RoutedEnvironment

        built = {}
        try:
            for name in e.routes:
                built[name] = environment(dataclasses.replace(e, kind=name, routes=[], wrap=""),
                                          fleet)
        except BaseException:
            for env in built.values():
                env.close()
            raise
        env = RoutedEnvironment(built)
    elif e.kind == "tools":
        env = envs.make_environment(e.tools, e.call_format, workers=e.workers,
                                    timeout_s=e.timeout_s, batch_timeout_s=e.batch_timeout_s,
                                    mode=e.mode, turn_rewards=dict(e.turn_rewards))
    elif ":" in e.kind:  # a host-side environment of the user's
        env = registry.factory(e.kind)(e)
    else:
        s = e.session
        env = envs.make_session_environment(
            e.kind, e.call_format, limits=s.limits(), max_live=s.max_live, spares=s.spares,
            turn_rewards=dict(e.turn_rewards), check_workers=e.workers,
            check_timeout_s=s.check_timeout_s, mode=e.mode, max_calls=s.max_calls, fleet=fleet)
    return registry.factory(e.wrap, "env.wrap")(env, e) if e.wrap else env


# ------------------------------------------------------------------ generators
@dataclass(frozen=True)
class Generators:
    """What makes the loop's and evaluation's responses: each
    `generate(params, prompt_B_L, pmask_B_L, key) -> generate.Generated` (host prompts)."""

    train: Callable
    greedy: Callable  # temperature 0 (evaluation only)
    sampled: Callable  # temperature 1, no truncation (evaluation)
    glue: Optional[episodes.Glue] = None  # how observations become ids (multi-turn)


def generators(policy: Policy, setup: TaskSetup, sampling: SamplingConfig, env=None,
               env_cfg: Optional[EnvConfig] = None, traces: Optional[Traces] = None,
               train_every_row: bool = False, eval_rows: tuple[int, int] = (0, 0),
               name: str = "", stream: Optional[StreamConfig] = None) -> Generators:
    """One sampler call per batch, or with an environment multi-turn episodes (episodes.py):
    the turn sampler stops on the environment's call markers (their ids). `train_every_row`:
    the train generator gives every process's texts (an evaluation at `sampling`'s
    temperature), not only its own rows' (what the loop verifies). `name`: an extra held-out
    set's (its evaluation samplers' compiles are counted under it). `stream` (rows > 0):
    multi-turn episodes streamed through decode rows (streaming.py), not in lock step."""
    tok, put = setup.tokenizer, policy.put
    traces = traces if traces is not None else Traces()
    if env is None:
        rows, insert = eval_rows
        if rows:  # evaluation by continuous batching (eval.decode_rows)
            def stream(name: str, temperature: float):
                return generate.continuous(make_continuous_sampler(
                    policy.model, max_new_tokens=setup.max_new_tokens,
                    prompt_len=setup.prompt_len, rows=rows, insert_rows=insert or max(
                        rows // 8, 1), eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                    temperature=temperature, mesh=policy.mesh,
                    on_trace=lambda piece: traces.update([f"{name}_{piece}"])), tok, put)

            greedy, sampled = stream(f"sampler_eval_greedy{name and '_' + name}", 0.0), stream(
                f"sampler_eval_sampled{name and '_' + name}", 1.0)
        else:
            greedy = generate.single_turn(policy.sample_greedy, tok, put, every_row=True)
            sampled = generate.single_turn(policy.sample_eval, tok, put, every_row=True)
        return Generators(generate.single_turn(policy.sample_train, tok, put, train_every_row),
                          greedy, sampled)
    stops = [tok.encode(t, add_special_tokens=False) for t in env.stop_texts]
    prefix, suffix = env.observation_prefix, env.observation_suffix
    if env_cfg.call_format == "hermes" and getattr(tok, "chat_template", None):
        prefix, suffix = chat.tool_glue(tok)  # the chat model's own tool turn
    glue = episodes.Glue.of(tok, prefix, suffix)
    schedule = streaming.Schedule(
        stream.rows, stream.inserts, stream.chunk_steps, stream.call_delay_chunks,
        stream.env_threads, stream.release_rows, stream.late_calls == "defer",
        stream.lookahead_steps) if stream is not None and stream.rows else None

    def make(name: str, temperature: float, top_k: int = 0, top_p: float = 1.0,
             every_row: bool = True, group_size: int = 1, carry_batches: int = 0):
        sampler = make_turn_sampler(
            policy.model, max_new_tokens=setup.max_new_tokens,
            observation_tokens=env_cfg.observation_tokens, eos_id=tok.eos_token_id,
            pad_id=tok.pad_token_id, stops=stops, temperature=temperature, top_k=top_k,
            top_p=top_p, group_size=group_size,
            prompt_len=setup.prompt_len if schedule else 0, mesh=policy.mesh,
            on_trace=lambda piece: traces.update([f"{name}_{piece}"]))
        if schedule:  # episodes streamed through the rows, calls overlapped (streaming.py)
            return generate.streamed(sampler, env, tok, glue, env_cfg.max_turns, put,
                                     schedule, group_size, carry_batches, every_row)
        return generate.multi_turn(sampler, env, tok, glue, env_cfg.max_turns, put, every_row)

    return Generators(make("sampler", sampling.temperature, sampling.top_k, sampling.top_p,
                           every_row=train_every_row, group_size=policy.group_size,
                           carry_batches=stream.carry_batches if stream else 0),
                      make(f"sampler_eval_greedy{name and '_' + name}", 0.0),
                      make(f"sampler_eval_sampled{name and '_' + name}", 1.0), glue)


# ------------------------------------------------------------------ update steps
@dataclass(frozen=True)
class Updates:
    rl_tx: object  # optax transform over {"policy": ..., ["value": ...]}
    rl_step: Callable  # jitted (state, ref_params, TrainBatch, key, actor_on) -> (state, metrics)
    init_rl_params: Callable  # (warm policy params, key) -> {"policy": ..., ["value": ...]}
    policy_params: Callable  # (state params, ref params) -> the policy's whole tree
    ppo_prepare: Optional[Callable]  # jitted (params, ref, batch, outcome_B, kl_coef) -> ...


def _settings(o, learning_rate: float, updates_per_step: int, num_steps: int):
    """The RL optimizer's settings: its warm-up and horizon in optimizer updates."""
    return optim.OptimizerSettings(
        learning_rate=learning_rate, warmup_steps=o.lr_warmup_steps * updates_per_step,
        total_steps=num_steps * updates_per_step, schedule=o.lr_schedule, b1=o.adam_b1,
        b2=o.adam_b2, weight_decay=o.weight_decay, max_grad_norm=o.max_grad_norm)


def updates(policy: Policy, setup: TaskSetup, algo: AlgoConfig, temperature: float,
            num_steps: int, traces: Traces,
            distill: Optional[train_step.Distill] = None) -> Updates:
    """The RL step (GRPO family or PPO; with a distillation teacher, `distill`) and PPO's
    prepare step, each jitted with its train state's shardings as out_shardings (one
    compile)."""
    model, repl = policy.model, sharding.replicated(policy.mesh)
    a, o = algo, algo.optim
    group = a.samples_per_prompt if a.share_prompts else 1
    pack = a.pack
    if pack.row_tokens:
        full = setup.prompt_len + setup.max_new_tokens
        if pack.row_tokens < full:
            raise ConfigError(f"config key 'algo.pack.row_tokens': {pack.row_tokens} slots "
                              f"cannot hold one row of {setup.prompt_len} prompt + "
                              f"{setup.max_new_tokens} response slots; use >= {full}")
        sharding.check_batch(pack.microbatch_rows, policy.mesh, "algo.pack.microbatch_rows")
    schedule = train_step.UpdateSchedule(a.epochs_per_rollout, a.minibatches_per_epoch,
                                         a.microbatches, group,
                                         pack.microbatch_rows if pack.row_tokens else 0,
                                         pack.row_tokens, a.samples_per_prompt)
    per_step = schedule.epochs * schedule.minibatches
    layout = a.ppo.critic if a.name == "ppo" else None
    rl_tx, rl_lr = optim.make_rl_optimizer(
        _settings(o, o.learning_rate, per_step, num_steps),
        _settings(o, a.ppo.critic_learning_rate, per_step, num_steps) if layout else None)

    adapters = setup.model_cfg.lora_rank > 0
    # Jitted: XLA drops the base initialisation whose output is unused.
    init_adapters = jax.jit(lambda key: lora.split(init_params(model, key))[1])

    def init_rl_params(warm_params, key):
        """{"policy": warm params} (+ {"value": critic} for PPO); with LoRA {"policy": fresh
        adapters} (B = 0: the policy starts at the warm params), the warm params being the
        frozen base that the loop holds as the reference."""
        if adapters:
            return {"policy": init_adapters(key)}
        params = {"policy": warm_params}
        if layout:
            params["value"] = value_model.init_critic(setup.model_cfg, layout, warm_params, key)
        return params

    def policy_params(params, ref_params):
        """The policy the sampler and evaluation run: the trained params, or with LoRA the
        frozen base (= the reference) with the trained adapters (no copy)."""
        return lora.merge(ref_params, params["policy"]) if adapters else params["policy"]

    abstract_params = jax.eval_shape(policy.init_params, jax.random.key(0))
    abstract_rl = jax.eval_shape(init_rl_params, abstract_params, jax.random.key(0))
    rl_state_sh = policy.shardings(jax.eval_shape(lambda p: optim.init_train_state(p, rl_tx),
                                                  abstract_rl))
    l = a.loss
    if l.kl_coef < 0:  # -1 is resolved by config.validate (by the reward source)
        raise ConfigError("config key 'algo.loss.kl_coef': -1 is resolved by "
                          "rlvr_jax.config.validate; pass the config through it")
    loss = train_step.LossOptions(
        eps_low=l.clip_eps_low, eps_high=l.clip_eps_high,
        kl_coef=0.0 if a.ppo.kl_in_reward else l.kl_coef, kl_estimator=l.kl_estimator,
        loss_agg=l.agg, norm_tokens=setup.max_new_tokens, dual_clip_c=l.dual_clip_c,
        policy_loss=l.kind, entropy_coef=l.entropy_coef, correction=l.correction,
        is_cap=l.is_cap, is_bounds=(l.is_mask_low, l.is_mask_high),
        objective_options=tuple(sorted(dict(l.options).items())))
    critic = (train_step.CriticOptions(layout, a.ppo.value_clip, a.ppo.vf_coef)
              if layout else None)
    rl_step = train_step.make_rl_step(
        model, rl_tx, rl_lr, prompt_len=setup.prompt_len, temperature=temperature, loss=loss,
        critic=critic, schedule=schedule, state_sharding=rl_state_sh, metrics_sharding=repl,
        adapters=adapters, distill=distill, on_trace=counter(traces, "train_step"))
    ppo_prepare = None
    if layout:
        p = a.ppo
        ppo_prepare = make_ppo_prepare(
            model, prompt_len=setup.prompt_len, temperature=temperature, critic_layout=layout,
            gamma=p.gae_gamma, lam=p.gae_lambda, whiten_advantages=p.whiten_advantages,
            kl_in_reward=p.kl_in_reward, kl_estimator=l.kl_estimator, group_size=group,
            pack_rows=schedule.pack_rows, pack_capacity=schedule.pack_capacity,
            mesh=policy.mesh, on_trace=counter(traces, "ppo_prepare"))
    return Updates(rl_tx, rl_step, init_rl_params, policy_params, ppo_prepare)


@dataclass(frozen=True)
class Warmup:
    """The supervised warm start's optimizer and jitted step, shared by every job."""

    tx: object
    step: Callable  # jitted (state, SFTBatch) -> (state, metrics), state donated


def warmup(policy: Policy, setup: TaskSetup, w: WarmupConfig, traces: Traces) -> Warmup:
    """The SFT step on demonstrations, jitted with its train state's shardings as
    out_shardings (one compile)."""
    tx, lr = optim.make_optimizer(optim.OptimizerSettings(
        learning_rate=w.learning_rate, warmup_steps=w.lr_warmup_steps, total_steps=w.steps,
        schedule="cosine", b1=0.9, b2=0.99, weight_decay=w.weight_decay, max_grad_norm=1.0))
    abstract_params = jax.eval_shape(policy.init_params, jax.random.key(0))
    state_sh = policy.shardings(jax.eval_shape(lambda p: optim.init_train_state(p, tx),
                                               abstract_params))
    step = train_step.make_sft_step(policy.model, tx, lr, prompt_len=setup.prompt_len,
                                    state_sharding=state_sh,
                                    metrics_sharding=sharding.replicated(policy.mesh),
                                    on_trace=counter(traces, "sft_step"))
    return Warmup(tx, step)


def reference_params(params, compute_dtype: str):
    """A frozen policy (the RL reference, a loaded reward model) held in the compute dtype:
    the model casts every parameter to it where it is used (policy.py), so its log-probs are
    bitwise those of the float32 copy, in half the memory (bfloat16 compute)."""
    dt = jnp.dtype(compute_dtype)
    return jax.tree.map(lambda x: x.astype(dt) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                        params)


def check_batches(mesh: jax.sharding.Mesh, sizes: dict[str, int]) -> None:
    """Every batch (config key -> sequences) splits evenly over the mesh's devices."""
    for key, size in sizes.items():
        sharding.check_batch(size, mesh, key)
