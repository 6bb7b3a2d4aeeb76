"""The one place the run config is unpacked: tokenizer, task, model, mesh and the jitted
functions (samplers, update steps), each built from the plain values it needs."""

from __future__ import annotations

import collections
import os
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import jax

from rlvr_jax import sharding, train_step
from rlvr_jax.config import RunConfig
from rlvr_jax.models import value as value_model
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.sampling import make_sampler
from rlvr_jax.data import loaders
from rlvr_jax.models import hf
from rlvr_jax.tasks.arithmetic import ArithmeticTask, verify_all
from rlvr_jax.tasks.codegen import CodegenTask
from rlvr_jax.tasks.dataset import DatasetTask, make_render
from rlvr_jax.tokenizer import load_pretrained_tokenizer, load_tokenizer, save_char_tokenizer
from rlvr_jax.verify.pool import VerifierPool


@dataclass
class Components:
    tokenizer: Any
    task: Any  # ArithmeticTask | DatasetTask
    model: Decoder
    mesh: jax.sharding.Mesh
    prompt_len: int  # P: prompt slots (left-padded)
    max_new_tokens: int  # N: response slots
    put: Callable  # host array (pytree) -> device, batch-sharded
    init_params: Callable  # key -> params, created already sharded
    sample_train: Callable  # jitted (params, prompt, mask, key) -> Rollout
    sample_greedy: Callable
    sample_eval: Callable  # temperature 1, no truncation
    rl_tx: Any
    rl_step: Callable  # jitted (state, ref_params, TrainBatch, key, actor_on) -> (state, metrics)
    init_rl_params: Callable  # (warm policy params, key) -> {"policy": ..., ["value": ...]}
    ppo_prepare: Any  # jitted (params, ref, batch, outcome_B, kl_coef) -> (batch, metrics) | None
    sampled_prompts: int  # prompts sampled per step (> prompts_per_step: dynamic sampling)
    sft_tx: Any
    sft_step: Callable  # jitted (state, SFTBatch) -> (state, metrics)
    state_sharding: Callable  # abstract TrainState -> shardings
    traces: collections.Counter  # how often each jitted function was traced (= compiled)
    verify: Callable  # (problems, completions) -> verdicts (host; worker pool for datasets)
    submit: Callable  # the same, non-blocking: returns a future
    close: Callable  # stops verifier workers


def prompt_budget(task: ArithmeticTask, tokenizer) -> int:
    """Tokens in the longest prompt the task can produce (all-9 operands, widest operator)."""
    longest = "9" * task.operand_digits
    question = longest + ("-" + longest) * (task.max_operands - 1)
    return len(tokenizer.encode(task.prompt_template.format(question=question),
                                add_special_tokens=False))


def _dataset_task(cfg: RunConfig, tokenizer) -> tuple[DatasetTask, int]:
    """The dataset task and its prompt budget (the longest rendered prompt). Prompts past
    `task.max_prompt_tokens` are bad rows: an error naming file:line, or skipped if asked."""
    t = cfg.task
    render = make_render(tokenizer, t.instruction)
    splits, longest = [], 1
    for path in (t.train_path, t.test_path):
        problems, skipped = loaders.load(path, t.format, t.on_bad_row)
        kept = []
        for p in problems:
            n = len(tokenizer.encode(render(p), add_special_tokens=False))
            if n > t.max_prompt_tokens:
                if t.on_bad_row == "raise":
                    raise loaders.DatasetError(
                        f"{p.uid}: prompt of {n} tokens exceeds task.max_prompt_tokens="
                        f"{t.max_prompt_tokens}")
                skipped += 1
                continue
            kept.append(p)
            longest = max(longest, n)
        if skipped:
            print(f"{path}: skipped {skipped} bad rows (task.on_bad_row=skip)", flush=True)
        splits.append(kept)
    return DatasetTask(splits[0], splits[1], render), longest


def _verifier(cfg: RunConfig, task):
    """(verify(problems, completions) -> verdicts, submit(...) -> future of the same, close)."""
    if cfg.verifier.kind == "inprocess":
        verify = lambda problems, completions: verify_all(task, problems, completions)

        def submit(problems, completions):
            done = Future()
            done.set_result(verify(problems, completions))
            return done

        return verify, submit, (lambda: None)
    v = cfg.verifier
    pool = VerifierPool(v.kind, workers=v.workers, timeout_s=v.timeout_s,
                        batch_timeout_s=v.batch_timeout_s,
                        mode=v.mode if v.kind == "code" else None)
    return (lambda problems, completions: pool.verify(task.verify_jobs(problems, completions)),
            lambda problems, completions: pool.submit(task.verify_jobs(problems, completions)),
            pool.close)


def build(cfg: RunConfig) -> Components:
    t = cfg.task
    if cfg.model.path:  # a Hugging Face directory: its tokenizer and architecture
        tokenizer = load_pretrained_tokenizer(cfg.model.path)
        cfg.model = hf.read_config(cfg.model.path, cfg.model)
    else:
        tok_dir = os.path.join(cfg.run_dir, "tokenizer")
        if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
            save_char_tokenizer(tok_dir)
        tokenizer = load_tokenizer(tok_dir)
    if t.name == "dataset":
        task, prompt_len = _dataset_task(cfg, tokenizer)
    elif t.name == "codegen":
        task = CodegenTask(t.heldout_fraction, t.split_seed)
        prompt_len = len(tokenizer.encode("x*9-99=", add_special_tokens=False))
    else:
        task = ArithmeticTask(tuple(t.operators), t.operand_digits, t.min_operands,
                              t.max_operands, t.heldout_fraction, t.split_seed,
                              t.prompt_template, t.zero_pad_operands)
        prompt_len = prompt_budget(task, tokenizer)
    verify, submit, close = _verifier(cfg, task)
    model = Decoder(cfg.model, cfg.model.vocab_size or len(tokenizer))
    mesh = sharding.make_mesh(cfg.mesh.data, cfg.mesh.fsdp)
    rl_batch = cfg.algo.prompts_per_step * cfg.algo.samples_per_prompt
    sharding.check_batch(rl_batch, mesh, "algo.prompts_per_step")
    sharding.check_batch((cfg.algo.sampled_prompts_per_step or cfg.algo.prompts_per_step)
                         * cfg.algo.samples_per_prompt // cfg.verifier.overlap_chunks, mesh,
                         "verifier.overlap_chunks")
    sharding.check_batch(cfg.warmup.sequences_per_step, mesh, "warmup.sequences_per_step")
    sharding.check_batch(cfg.eval.sequences_per_batch, mesh, "eval.sequences_per_batch")
    batch_sh, repl = sharding.batch_sharding(mesh), sharding.replicated(mesh)
    traces: collections.Counter = collections.Counter()
    counter = lambda name: (lambda: traces.update([name]))

    abstract_params = jax.eval_shape(partial(init_params, model), jax.random.key(0))
    params_sh = sharding.state_shardings(abstract_params, mesh)
    # Params are created already sharded: no host-side full copy, no resharding afterwards.
    init = jax.jit(partial(init_params, model), out_shardings=params_sh)

    n = cfg.sampling.max_new_tokens
    sampler = partial(make_sampler, model, max_new_tokens=n, eos_id=tokenizer.eos_token_id,
                      pad_id=tokenizer.pad_token_id)
    s = cfg.sampling
    sample_train = sampler(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                           on_trace=counter("sampler"))
    sample_greedy = sampler(temperature=0.0, on_trace=counter("sampler_eval_greedy"))
    sample_eval = sampler(temperature=1.0, on_trace=counter("sampler_eval_sampled"))
    def state_sharding(abstract_state):
        return sharding.state_shardings(abstract_state, mesh)

    a, w = cfg.algo, cfg.warmup
    updates_per_step = a.epochs_per_rollout * a.minibatches_per_epoch
    opt = lambda lr: dict(learning_rate=lr, warmup_steps=a.lr_warmup_steps * updates_per_step,
                          total_steps=cfg.num_steps * updates_per_step, schedule=a.lr_schedule,
                          b1=a.adam_b1, b2=a.adam_b2, weight_decay=a.weight_decay,
                          max_grad_norm=a.max_grad_norm)
    critic = a.critic if a.name == "ppo" else None
    rl_tx, rl_lr = train_step.make_rl_optimizer(opt(a.learning_rate),
                                                opt(a.critic_learning_rate) if critic else None)

    def init_rl_params(warm_params, key):
        """{"policy": warm params} (+ {"value": critic} for PPO)."""
        params = {"policy": warm_params}
        if critic:
            params["value"] = value_model.init_critic(cfg.model, critic, warm_params, key)
        return params

    abstract_rl = jax.eval_shape(init_rl_params, abstract_params, jax.random.key(0))
    rl_state_sh = state_sharding(jax.eval_shape(lambda p: train_step.init_train_state(p, rl_tx),
                                                abstract_rl))
    sharding.check_batch(rl_batch // (a.minibatches_per_epoch * a.microbatches), mesh,
                         "algo.microbatches")
    temperature = s.temperature  # > 0 (validated): the sampler's distribution, recomputed
    rl_step = train_step.make_rl_step(
        model, rl_tx, rl_lr, prompt_len=prompt_len, temperature=temperature,
        eps_low=a.clip_eps_low, eps_high=a.clip_eps_high,
        kl_coef=0.0 if a.kl_in_reward else a.kl_coef, kl_estimator=a.kl_estimator,
        loss_agg=a.loss_agg, norm_tokens=n, dual_clip_c=a.dual_clip_c,
        policy_loss=a.policy_loss, entropy_coef=a.entropy_coef, critic=critic,
        value_clip=a.value_clip, vf_coef=a.vf_coef, epochs=a.epochs_per_rollout,
        minibatches=a.minibatches_per_epoch, microbatches=a.microbatches,
        state_sharding=rl_state_sh, metrics_sharding=repl, on_trace=counter("train_step"))
    ppo_prepare = None
    if critic:
        ppo_prepare = train_step.make_ppo_prepare(
            model, prompt_len=prompt_len, temperature=temperature, critic=critic,
            gamma=a.gae_gamma, lam=a.gae_lambda, whiten_advantages=a.whiten_advantages,
            kl_in_reward=a.kl_in_reward, kl_estimator=a.kl_estimator,
            on_trace=counter("ppo_prepare"))
    sft_tx, sft_lr = train_step.make_optimizer(
        learning_rate=w.learning_rate, warmup_steps=w.lr_warmup_steps, total_steps=w.steps,
        schedule="cosine", b1=0.9, b2=0.99, weight_decay=w.weight_decay, max_grad_norm=1.0)
    sft_state_sh = state_sharding(jax.eval_shape(lambda p: train_step.init_train_state(p, sft_tx),
                                                 abstract_params))
    sft_step = train_step.make_sft_step(model, sft_tx, sft_lr, prompt_len=prompt_len,
                                        state_sharding=sft_state_sh, metrics_sharding=repl,
                                        on_trace=counter("sft_step"))
    return Components(
        tokenizer=tokenizer, task=task, model=model, mesh=mesh, prompt_len=prompt_len,
        max_new_tokens=n, put=lambda x: jax.device_put(x, batch_sh), init_params=init,
        sample_train=sample_train, sample_greedy=sample_greedy, sample_eval=sample_eval,
        rl_tx=rl_tx, rl_step=rl_step, init_rl_params=init_rl_params,
        ppo_prepare=ppo_prepare, sampled_prompts=a.sampled_prompts_per_step or a.prompts_per_step,
        sft_tx=sft_tx, sft_step=sft_step,
        state_sharding=state_sharding, traces=traces, verify=verify, submit=submit,
        close=close)
