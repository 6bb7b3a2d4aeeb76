"""The RL job (`job=rl`): the RL loop. Every host side effect of its steps (logging,
checkpoints, files) lives here; the run's life around it (directory, lock, signals, watchdog,
resume, the finished-run check) is run_scaffold.py's, shared with the other jobs.

    warm start (SFT on imperfect demonstrations, or HF weights) -> evaluate -> RL steps ->
    evaluate -> summary

One RL step, one stage per line (stages in rlvr_jax/stages.py): take the step's batch
(rollouts.py: prompts -> generate (jit: one sampler call, or multi-turn episodes with tools in
the sandbox, as the builder chose) | verify (worker processes, overlapping) -> reward-model
scores (jit, when one is set: learned_reward.py) -> rewards; made at the step, or
`rollout.off_policy_steps` ahead and verified while the update runs) -> dynamic sampling ->
advantages -> update (jit, donated) -> log -> checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
import time
from functools import partial

import jax

from rlvr_jax import (build, carry, distill, learned_reward, perf, rewards, rollouts, run_scaffold,
                      stages, warmstart)
from rlvr_jax.config import ConfigError, RunConfig, reward_components
from rlvr_jax.types import LoopState, StepTimes
from rlvr_jax.verify.verifiers import fleet_for, make_verifier

SUMMARY_KEYS = ("eval/sampled_accuracy_start", "eval/sampled_accuracy_end",
                "eval/greedy_accuracy_start", "eval/greedy_accuracy_end", "train/wall_seconds")


def run(cfg: RunConfig, session: run_scaffold.Session) -> dict:
    """The RL job, inside the run scaffold (run_scaffold.run(cfg, jobs) calls it)."""
    traces = build.Traces()
    setup = build.run_task_setup(cfg)
    cfg = dataclasses.replace(cfg, model=setup.model_cfg)  # resolved from model.path, if any
    a, G = cfg.algo, cfg.algo.samples_per_prompt
    train_devices, sampler_devices = build.split_devices(cfg.rollout.sampler_devices)
    policy = build.policy(setup, cfg.mesh, cfg.sampling, traces, G, train_devices)
    sampler = policy if sampler_devices is None else build.policy(
        setup, cfg.mesh, cfg.sampling, traces, G, sampler_devices)  # its own devices
    if sampler is not policy and cfg.reward.source != "verifier":
        raise ConfigError("config key 'rollout.sampler_devices': a reward model scores on the "
                          "trainer's devices, not yet on a split placement (set it to 0)")
    build.check_batches(policy.mesh, {
        "algo.prompts_per_step": a.prompts_per_step * G,
        "algo.microbatches": (a.prompts_per_step * G
                              // (a.minibatches_per_epoch * a.microbatches)),
        } | ({"warmup.sequences_per_step": cfg.warmup.sequences_per_step}
             if cfg.warmup.steps else {}))  # without a warm start, its batch is not refused
    e = cfg.eval  # eval.num_problems=0: no evaluation, and no refusal of its batches
    build.check_batches(sampler.mesh, {
        "verifier.overlap_chunks": (a.dapo.sampled_prompts(a.prompts_per_step)
                                    * G // cfg.verifier.overlap_chunks)}
        | ({"rollout.stream.rows": cfg.rollout.stream.rows} if cfg.rollout.stream.rows else {})
        | ({"eval.sequences_per_batch": e.sequences_per_batch} if e.num_problems else {})
        | ({"eval.decode_rows": e.decode_rows,  # continuous batching's row sets
            "eval.insert_rows": e.insert_rows or max(e.decode_rows // 8, 1)}
           if e.num_problems and e.decode_rows else {}))
    per_chunk = a.dapo.sampled_prompts(a.prompts_per_step) // cfg.verifier.overlap_chunks
    if per_chunk % jax.process_count():  # each process verifies whole groups of its own
        raise ConfigError(f"config key 'algo.prompts_per_step': {per_chunk} prompts per "
                          f"sampler call do not split over {jax.process_count()} processes")
    sft = build.warmup(policy, setup, cfg.warmup, traces)  # the warm start's step
    teacher = (distill.load(cfg.distill.teacher, setup, policy) if cfg.distill.teacher
               else None)  # on-policy distillation's frozen teacher
    updates = build.updates(policy, setup, a, cfg.sampling.temperature, cfg.num_steps, traces,
                            teacher and distill.options(teacher, cfg.distill.mode,
                                                        cfg.distill.coef))
    learned = learned_reward.maybe_load(cfg.reward.reward_model_dir, setup, policy, traces)
    v = cfg.verifier
    fleet = fleet_for(v.backend, cfg.fleet, cfg.run_dir)  # None: pools on this host
    verifier = make_verifier(v.kind, workers=v.workers, timeout_s=v.timeout_s,
                             batch_timeout_s=v.batch_timeout_s, mode=v.mode,
                             kinds=getattr(setup.task, "verifier_kinds", ()), fleet=fleet)
    env = build.environment(cfg.env, fleet_for(cfg.env.backend, cfg.fleet, cfg.run_dir,
                                               jax.process_count()))
    generators = partial(build.generators, sampler, sampling=cfg.sampling, env=env,
                         env_cfg=cfg.env, traces=traces, stream=cfg.rollout.stream,
                         eval_rows=(cfg.eval.decode_rows, cfg.eval.insert_rows))
    # eval.extra_sets: their verifiers, prompt slots and evaluation samplers
    extra = build.extra_sets(setup, v, lambda own, name: generators(setup=own, name=name),
                             fleet)
    gens = None
    try:
        gens = generators(setup=setup)
        return _run(cfg, setup, policy, sampler, sft, updates, gens, env, verifier, learned,
                    traces, session, extra, teacher)
    finally:
        carry.close(getattr(gens, "train", None))  # the episodes a carried stream holds
        for closing in [verifier] + [x.verifier for x in extra]:
            closing.close()  # worker processes, if any
        if env is not None:
            env.close()


def _run(cfg: RunConfig, setup: build.TaskSetup, policy: build.Policy,
         sampler: build.Policy, sft: build.Warmup,
         updates: build.Updates, gens: build.Generators, env, verifier,
         learned: learned_reward.LearnedReward | None, traces: build.Traces,
         session: run_scaffold.Session, extra_sets=(),
         teacher: distill.Teacher | None = None) -> dict:
    a, w, P, G = cfg.algo, cfg.warmup, cfg.algo.prompts_per_step, cfg.algo.samples_per_prompt
    ckpt, tracker = run_scaffold.outputs(cfg)
    stop_requested, t_start = session.stop_requested, session.t_start
    tracker.write(f"resolved config: {os.path.abspath(os.path.join(cfg.run_dir, 'run_config.json'))}")
    teacher_args = () if teacher is None else (teacher.params,)
    if teacher is not None:
        tracker.write(f"{teacher.describe}; distill.mode={cfg.distill.mode} "
                      f"coef={cfg.distill.coef:g}")
    if learned is not None:
        tracker.write(f"reward model {os.path.abspath(cfg.reward.reward_model_dir)} (step "
                      f"{learned.steps}): reward.source={cfg.reward.source}, "
                      f"kl_coef={a.loss.kl_coef:g}")
    eval_score = learned_reward.eval_scorer(learned, policy.put)
    tracker.write(f"run dir {os.path.abspath(cfg.run_dir)} | devices {policy.mesh.devices.size} "
                  f"({jax.default_backend()}) mesh {dict(policy.mesh.shape)} | batch {P}x{G}="
                  f"{P * G} sequences | prompt {setup.prompt_len} + response "
                  f"{setup.max_new_tokens} tokens | processes {jax.process_count()}")
    tool_demos = None if env is None else warmstart.ToolDemos(
        env.render_call, gens.glue, cfg.env.observation_tokens, cfg.env.demo_tool_fraction)
    warm = warmstart.warm_params(policy, setup, sft, warmup=w, seed=cfg.seed, ckpt=ckpt,
                                 tracker=tracker, should_stop=stop_requested, tools=tool_demos)
    held_out = partial(warmstart.held_out_accuracy, gens, setup, verifier, cfg.eval,
                       sampler.put, score=eval_score, extra=extra_sets, say=tracker.write)
    eval_key = warmstart.eval_key(cfg.seed)
    fresh = warmstart.rl_state(policy, updates, warm, cfg.seed)
    ref_params = build.reference_params(warm, setup.model_cfg.compute_dtype)  # frozen
    policy_params = updates.policy_params  # (state params, ref) -> the policy's whole tree
    place, snapshot, sampler_ref = build.sampler_placement(policy, sampler, ref_params)
    sampler_params = lambda p: policy_params(place(p), sampler_ref)  # on the sampler's devices
    # The start evaluation runs the policy as every later one does (with LoRA: the base with
    # fresh adapters, the same values as the warm params), so the samplers compile once.
    eval_start = warmstart.start_evaluation(cfg.run_dir, tracker, lambda: held_out(
        sampler_params(fresh.params), eval_key, label=" before RL"))
    if setup.model_cfg.lora_rank:
        tracker.write(lora_line(setup.model_cfg, fresh.params["policy"], warm))
    state, loop, wall_before = run_scaffold.resume(
        ckpt, tracker, fresh, run_scaffold.fresh_loop(cfg.seed, a.loss.kl_coef), cfg.run_dir,
        cfg.num_steps)
    write_wall = run_scaffold.wall_writer(cfg.run_dir)
    tracker.start_at(loop.step)
    base_key = jax.random.wrap_key_data(loop.rng_key)
    rl_key = jax.random.fold_in(base_key, 3)
    update_key = jax.random.fold_in(base_key, 5)
    sampled_P = a.dapo.sampled_prompts(P)  # prompts sampled per step (DAPO: more than P)
    # The run's settings, bound once: each stage below takes only its per-step values.
    prompts = partial(stages.prompts, setup.task, setup.tokenizer, seed=cfg.seed,
                      prompts_per_step=sampled_P, samples_per_prompt=G,
                      prompt_len=setup.prompt_len)
    start = partial(stages.start_sampling, gens.train, sampler.put, verifier, setup.task,
                    learned_reward.train_scorer(learned), chunks=cfg.verifier.overlap_chunks,
                    samples_per_prompt=G)
    d, r = a.dapo, cfg.reward
    components = reward_components(cfg)
    weights = rewards.component_weights(components, r.weights, r.reward_model_weight)
    score = partial(stages.score, source=r.source, components=components, weights=weights,
                    eos_id=setup.tokenizer.eos_token_id,
                    reward_scheme=cfg.verifier.reward_scheme, samples_per_prompt=G,
                    max_new_tokens=setup.max_new_tokens,
                    overlong_buffer_tokens=d.overlong_buffer_tokens,
                    overlong_penalty_factor=d.overlong_penalty_factor,
                    mask_truncated=d.mask_truncated)
    plain_begin = partial(stages.begin, prompts=prompts, start=start, key=rl_key,
                          sampler_params=sampler_params)
    inputs = partial(stages.inputs, prompts=prompts, task=setup.task, key=rl_key,
                     samples_per_prompt=G)
    # With a carried stream (carry.py) the batches ahead are queued first.
    begin = carry.begin_for(gens.train, plain_begin, inputs=inputs, num_steps=cfg.num_steps)
    finish = partial(stages.finish, score=score)
    select = partial(stages.select, dynamic=d.dynamic_sampling, prompts_per_step=P)
    with_advantages = partial(stages.with_advantages, put=policy.put,
                              ppo_prepare=updates.ppo_prepare, estimator=a.adv_estimator,
                              eps=a.adv_eps, weights=weights, step_weight=a.gigpo.weight,
                              step_gamma=a.gigpo.gamma,
                              step_scale_by_std=a.gigpo.scale_by_std)
    next_kl_coef = partial(stages.next_kl_coef, target=a.ppo.kl_target, horizon=a.ppo.kl_horizon)
    sampler_flops = perf.sampler_flops_per_row(policy.model, policy_params(
        state.params, ref_params), setup.prompt_len, setup.max_new_tokens)
    utilisation = partial(stages.utilisation, sampler_flops_per_row=sampler_flops,
                          chunks=cfg.verifier.overlap_chunks, group_size=G,
                          max_new_tokens=setup.max_new_tokens,
                          devices=policy.mesh.devices.flatten().tolist())

    last = run_scaffold.last_step(loop.step, cfg.num_steps, cfg.stop_after_steps)
    off = cfg.rollout.off_policy_steps
    ahead = rollouts.fresh(off, rollouts.restore(ckpt, loop.step, state.params, off, snapshot),
                           carry.restore(gens.train, ckpt.restore_carried(loop.step),
                                         plain_begin, inputs, state.params))
    in_flight = partial(carry.state, gens.train)  # (ahead, next step) -> JSON or None
    # Batch k+d sampled on the sampler's own devices while update k runs, where that is safe.
    producer = rollouts.producer(off, sampler is not policy, jax.process_count(), env is None)
    take = partial(rollouts.take, begin=begin, finish=finish, snapshot=snapshot,
                   off_policy_steps=off, last=last,
                   run=producer.submit if producer else rollouts.inline)
    update_flops = 0.0
    for step in range(loop.step, last):
        if stop_requested():  # it came during the warm start or an evaluation: stop here
            if step > 0:
                ckpt.maybe_save(step, state, loop, force=True, behind=ahead.behind,
                                carried=partial(in_flight, ahead, step))
            last = step
            break
        t0 = time.perf_counter()
        ahead, made = take(ahead, step, state.params)  # sample | verify | score (async: ahead)
        t2 = time.perf_counter()
        rewards.breaker(made.sampled.verdicts, cfg.verifier.max_infra_share, step)     # breaker
        kept = select(loop.carry, made.groups)                                         # DAPO
        batch, adv_row = with_advantages(kept.groups, kept.n_real, state.params, ref_params,
                                         loop.kl_coef)                                 # host | jit
        update_args = (state, ref_params, batch, jax.random.fold_in(update_key, step),
                       float(step >= a.ppo.critic_warmup_steps), *teacher_args)
        # Shapes are fixed for the run: count once, tracing before the call (which reuses it).
        update_flops = update_flops or perf.traced_flops(updates.rl_step, *update_args)
        t_rl = time.perf_counter()
        state, metrics = updates.rl_step(*update_args)                                 # jit
        metrics = jax.device_get(metrics)  # the one device-to-host copy of the update
        t3 = time.perf_counter()
        sampled = made.sampled
        times = StepTimes(sampled.sample_s, sampled.verify_wait_s, t3 - t2, t3 - t0, t3 - t_rl)
        kl_coef = next_kl_coef(loop.kl_coef, adv_row)                                  # host
        row = ({f"train/{k}": float(v) for k, v in metrics.items()}
               | rewards.summary(sampled.verdicts, made.groups.returns_P_G)
               | rewards.component_summary(components, made.groups.components_P_G_C)
               | rewards.learned_summary(sampled.verdicts, sampled.learned_B)
               | rewards.by_source(stages.sources(made.problems, G), sampled.verdicts,
                                   made.groups.returns_P_G)
               | stages.timing(times, sampled.rollout.mask_B_R)
               | utilisation(update_flops, times, sampled.rollout.mask_B_R)
               | sampled.stats | kept.stats | adv_row | {"train/kl_coef": kl_coef}
               | {"rollout/staleness": step - made.version, "time/take_s": t2 - t0}
               | rollouts.version_lag(step, made)
               | {f"compiles/{k}": v for k, v in traces.items()}
               | {f"verify/samples_process_{i}": n for i, n in enumerate(sampled.verified)})
        tracker.log(step + 1, row)                                                     # log
        # The KL to the reference when the loss has one (k3, the default estimator, is >= 0
        # per token), else the approximate KL to the sampling policy (its mean can be < 0).
        kl_name, kl = (("kl_ref", row["train/kl_ref"]) if "train/kl_ref" in row
                       else ("kl_old", row["train/approx_kl_old"]))
        tracker.advance({"acc": row["reward/accuracy"], kl_name: kl})
        if not cfg.logger.progress_bar:  # a compact line per step instead of the bar
            tracker.write(f"step {step + 1}/{cfg.num_steps}  reward {row['reward/mean']:.3f}  "
                          f"acc {row['reward/accuracy']:.3f}  {kl_name} {kl:.4f}"
                          f"  {row['time/step_s']:.2f}s")
        loop = LoopState(step + 1, (step + 1) * sampled_P, loop.rng_key, kl_coef, kept.carry)
        stopping = stop_requested()                                                    # SIGTERM
        if ckpt.maybe_save(step + 1, state, loop, force=step + 1 == last or stopping,
                           behind=ahead.behind,
                           carried=partial(in_flight, ahead, step + 1)):               # checkpoint
            write_wall(wall_before + time.perf_counter() - t_start)
        if stopping:
            last = step + 1
            break
        if (cfg.eval.num_problems and cfg.eval.every_steps
                and (step + 1) % cfg.eval.every_steps == 0
                and step + 1 < cfg.num_steps):  # the last step gets the final evaluation
            rollouts.settle(ahead)  # a producer thread's sampling first
            result = held_out(sampler_params(state.params), eval_key, label=f" at step {step + 1}")
            tracker.log(step + 1, {f"eval/{k}": v for k, v in result.items()})
            tracker.write(run_scaffold.eval_line(step + 1, result))

    rollouts.drop(ahead)  # batches in flight at a stop: their snapshots are checkpointed
    if producer is not None:
        producer.shutdown(wait=True)
    tracker.end_progress()
    if last < cfg.num_steps or stop_requested():
        return run_scaffold.stopped(ckpt, tracker, write_wall,
                                    wall_before + time.perf_counter() - t_start, last,
                                    session.stop_reason())
    eval_end = held_out(sampler_params(state.params), eval_key, label=" after RL")
    tracker.log(cfg.num_steps, {f"eval/{k}": v for k, v in eval_end.items()})
    ckpt.close()
    wall = wall_before + time.perf_counter() - t_start
    write_wall(wall)
    summary = {  # without a held-out evaluation (eval.num_problems=0), no eval/ keys
        f"eval/{k}_{when}": e[k] for k in ("sampled_accuracy", "greedy_accuracy")
        for when, e in (("start", eval_start), ("end", eval_end)) if k in e} | {
        "train/wall_seconds": wall,
        "train/steps": cfg.num_steps,
        "compiles": dict(traces),
    } | {f"eval/sampled_learned_reward_{when}": e["sampled_learned_reward"]  # the proxy
         for when, e in (("start", eval_start), ("end", eval_end))
         if "sampled_learned_reward" in e}
    run_scaffold.write_summary(cfg.run_dir, summary)
    tracker.summary({k: summary[k] for k in SUMMARY_KEYS if k in summary})
    tracker.write(run_scaffold.format_table(summary, cfg.eval.num_problems,
                                            cfg.eval.sampled_per_problem, cfg.num_steps))
    tracker.close()
    return summary


def lora_line(model_cfg, adapters, base) -> str:
    """What trains under LoRA, for the log: rank, alpha, targets, trainable parameters."""
    count = lambda tree: sum(int(x.size) for x in jax.tree.leaves(tree))
    trained, frozen = count(adapters), count(base)
    return (f"LoRA on: rank {model_cfg.lora_rank}, alpha {model_cfg.lora_alpha:g}, targets "
            f"{','.join(model_cfg.lora_targets)}: {trained:,} trainable parameters "
            f"({100 * trained / frozen:.2f}% of the {frozen:,} frozen base)")
