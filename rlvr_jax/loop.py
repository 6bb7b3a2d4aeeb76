"""The run and the RL loop. Every host side effect (logging, checkpoints, files) lives here.

    warm start (SFT on imperfect demonstrations, or HF weights) -> evaluate -> RL steps ->
    evaluate -> summary

One RL step, one stage per line (stages in rlvr_jax/stages.py): prompts -> sample (jit) |
verify (worker processes, overlapping) -> reward-model scores (jit, when one is set:
learned_reward.py) -> rewards -> dynamic sampling -> advantages -> update (jit, donated) -> log
-> checkpoint. `job=reward_model` and `job=dpo` run preference_runs.py instead. Rerunning the
same command in the same run directory resumes from the last checkpoint (and says so); it never
silently restarts at step 0. One run holds a directory at a time (run_control.RunLock); SIGTERM
or a first Ctrl-C ends the run after the step in flight with a checkpoint
(run_control.StopSignals); a finished run says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from contextlib import nullcontext
from functools import partial

import jax

from rlvr_jax import (build, distributed, learned_reward, perf, preference_runs, rewards,
                      run_control, stages, tracking, warmstart)
from rlvr_jax.checkpoint import Checkpointer
from rlvr_jax.config import ConfigError, RunConfig, as_dict, warmstart_key
from rlvr_jax.types import LoopState, StepTimes
from rlvr_jax.verify.verifiers import make_verifier

SUMMARY_KEYS = ("eval/sampled_accuracy_start", "eval/sampled_accuracy_end",
                "eval/greedy_accuracy_start", "eval/greedy_accuracy_end", "train/wall_seconds")


def run(cfg: RunConfig) -> dict:
    """Train as `cfg` says in `cfg.run_dir`, resuming what is there. Returns the summary, or
    {"stopped_at_step": k, ...} when stopped early (stop_after_steps, SIGTERM, Ctrl-C)."""
    os.makedirs(cfg.run_dir, exist_ok=True)
    d = cfg.distributed  # several processes: join them first, before any device is touched
    distributed.initialize(d.coordinator_address, d.num_processes, d.process_id,
                           d.heartbeat_timeout_s, d.init_timeout_s)
    # One lock per run, held by the writer: the run's other processes share its directory.
    lock = run_control.RunLock(cfg.run_dir) if distributed.is_writer() else nullcontext()
    timeout = d.step_timeout_s if d.step_timeout_s >= 0 else (
        1800 if jax.process_count() > 1 else 0)
    with lock, run_control.StopSignals() as stop, run_control.Watchdog(timeout) as watchdog:
        distributed.check_process_count(cfg.run_dir)
        steps = preference_runs.steps_of(cfg)
        done = finished_summary(cfg.run_dir, steps)
        if done is not None and cfg.job == "reward_model":
            print(f"run {os.path.abspath(cfg.run_dir)} is complete: {json.dumps(done)}",
                  flush=True)
            return done
        if done is not None:
            table = format_table(done, cfg.eval.num_problems, cfg.eval.sampled_per_problem,
                                 steps)
            print(f"run {os.path.abspath(cfg.run_dir)} is complete ({steps} steps):\n"
                  f"{table}\nnothing to do (delete the directory, or change the command, to "
                  "run again)", flush=True)
            return done
        try:
            if cfg.job != "rl":  # learning from preference pairs
                return preference_runs.run(cfg, _task_setup(cfg), _stop_requested(
                    stop, watchdog.kick), build.Traces())
            return _build_and_run(cfg, stop, watchdog.kick)
        except run_control.Stopped as e:
            print(e, flush=True)
            return {"stopped_at_step": 0, "reason": str(e)}


def finished_summary(run_dir: str, num_steps: int) -> dict | None:
    """The summary of a run in `run_dir` that completed `num_steps` steps, else None."""
    path = os.path.join(run_dir, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        summary = json.load(f)
    return summary if summary.get("train/steps") == num_steps else None


def _task_setup(cfg: RunConfig) -> build.TaskSetup:
    task_setup = partial(build.task_setup, cfg.task, cfg.model, cfg.sampling.max_new_tokens,
                         os.path.join(cfg.run_dir, "tokenizer"))
    setup = task_setup() if distributed.is_writer() else None
    distributed.barrier("task_setup")  # the writer has saved the tokenizer the others read
    return setup or task_setup()


def _stop_requested(stop: run_control.StopSignals, progress):
    def stop_requested() -> bool:
        """Asked once per step (RL, reward model or warm-up) by every process: they agree,
        and the watchdog (distributed.step_timeout_s) sees progress."""
        progress()
        return distributed.any_process(stop.requested is not None)

    return stop_requested


def _build_and_run(cfg: RunConfig, stop: run_control.StopSignals, progress) -> dict:
    t_start = time.perf_counter()
    traces = build.Traces()
    setup = _task_setup(cfg)
    cfg = dataclasses.replace(cfg, model=setup.model_cfg)  # resolved from model.path, if any
    policy = build.policy(setup, cfg.mesh, cfg.sampling, traces)
    a = cfg.algo
    build.check_batches(policy.mesh, {
        "algo.prompts_per_step": a.prompts_per_step * a.samples_per_prompt,
        "verifier.overlap_chunks": (a.dapo.sampled_prompts(a.prompts_per_step)
                                    * a.samples_per_prompt // cfg.verifier.overlap_chunks),
        "algo.microbatches": (a.prompts_per_step * a.samples_per_prompt
                              // (a.minibatches_per_epoch * a.microbatches)),
        "warmup.sequences_per_step": cfg.warmup.sequences_per_step,
        "eval.sequences_per_batch": cfg.eval.sequences_per_batch})
    per_chunk = a.dapo.sampled_prompts(a.prompts_per_step) // cfg.verifier.overlap_chunks
    if per_chunk % jax.process_count():  # each process verifies whole groups of its own
        raise ConfigError(f"config key 'algo.prompts_per_step': {per_chunk} prompts per "
                          f"sampler call do not split over {jax.process_count()} processes")
    updates = build.updates(policy, setup, a, cfg.warmup, cfg.sampling.temperature,
                            cfg.num_steps, traces)
    learned = learned_reward.maybe_load(cfg.reward.reward_model_dir, setup, policy, traces)
    v = cfg.verifier
    verifier = make_verifier(v.kind, workers=v.workers, timeout_s=v.timeout_s,
                             batch_timeout_s=v.batch_timeout_s, mode=v.mode)
    try:
        return _run(cfg, setup, policy, updates, verifier, learned, traces, t_start, stop,
                    progress)
    finally:
        verifier.close()  # worker processes, if any


def _run(cfg: RunConfig, setup: build.TaskSetup, policy: build.Policy, updates: build.Updates,
         verifier, learned: learned_reward.LearnedReward | None, traces: build.Traces,
         t_start: float, stop: run_control.StopSignals, progress) -> dict:
    a, w, P, G = cfg.algo, cfg.warmup, cfg.algo.prompts_per_step, cfg.algo.samples_per_prompt
    if distributed.is_writer():
        with open(os.path.join(cfg.run_dir, "run_config.json"), "w") as f:
            json.dump(as_dict(cfg), f, indent=2)  # resolved (model read from model.path)
    ckpt = Checkpointer(cfg.run_dir, cfg.checkpoint.every_steps, cfg.checkpoint.max_to_keep,
                        os.path.join(w.shared_dir, warmstart_key(cfg)) if w.shared_dir else None)
    tracker = tracking.for_process(
        distributed.is_writer(), cfg.run_dir, mode=cfg.logger.mode, project=cfg.logger.project,
        entity=cfg.logger.entity, name=cfg.name, config=as_dict(cfg), total_steps=cfg.num_steps,
        progress_bar=cfg.logger.progress_bar)
    stop_requested = _stop_requested(stop, progress)
    tracker.write(f"resolved config: {os.path.abspath(os.path.join(cfg.run_dir, 'run_config.json'))}")
    if learned is not None:
        tracker.write(f"reward model {os.path.abspath(cfg.reward.reward_model_dir)} (step "
                      f"{learned.steps}): reward.source={cfg.reward.source}, "
                      f"kl_coef={a.loss.kl_coef:g}")
    eval_score = learned_reward.eval_scorer(learned, policy.put)
    tracker.write(f"run dir {os.path.abspath(cfg.run_dir)} | devices {policy.mesh.devices.size} "
                  f"({jax.default_backend()}) mesh {dict(policy.mesh.shape)} | batch {P}x{G}="
                  f"{P * G} sequences | prompt {setup.prompt_len} + response "
                  f"{setup.max_new_tokens} tokens | processes {jax.process_count()}")
    start = warmstart.start_or_resume(
        policy, setup, updates, verifier, warmup=w, eval_cfg=cfg.eval, seed=cfg.seed,
        kl_coef=a.loss.kl_coef, num_steps=cfg.num_steps, run_dir=cfg.run_dir, ckpt=ckpt,
        tracker=tracker, should_stop=stop_requested, score=eval_score)
    state, loop, ref_params = start.state, start.loop, start.ref_params
    held_out = partial(warmstart.held_out_accuracy, policy, setup, verifier, cfg.eval,
                       score=eval_score)
    write_wall = partial(warmstart.write_wall, cfg.run_dir) if distributed.is_writer() \
        else (lambda seconds: None)
    policy_params = updates.policy_params  # (state params, ref) -> what the sampler runs
    tracker.start_at(loop.step)
    base_key = jax.random.wrap_key_data(loop.rng_key)
    rl_key, eval_key = jax.random.fold_in(base_key, 3), warmstart.eval_key(cfg.seed)
    update_key = jax.random.fold_in(base_key, 5)
    sampled = a.dapo.sampled_prompts(P)
    # The run's settings, bound once: each stage below takes only its per-step values.
    prompts = partial(stages.prompts, setup.task, setup.tokenizer, seed=cfg.seed,
                      prompts_per_step=sampled, samples_per_prompt=G, prompt_len=setup.prompt_len)
    sample_and_verify = partial(stages.sample_and_verify, policy.sample_train, policy.put,
                                verifier, setup.task, setup.tokenizer,
                                learned_reward.train_scorer(learned),
                                chunks=cfg.verifier.overlap_chunks, samples_per_prompt=G)
    d, r = a.dapo, cfg.reward
    score = partial(stages.score, source=r.source, learned_weight=r.reward_model_weight,
                    eos_id=setup.tokenizer.eos_token_id,
                    reward_scheme=cfg.verifier.reward_scheme, samples_per_prompt=G,
                    max_new_tokens=setup.max_new_tokens,
                    overlong_buffer_tokens=d.overlong_buffer_tokens,
                    overlong_penalty_factor=d.overlong_penalty_factor,
                    mask_truncated=d.mask_truncated)
    select = partial(stages.select, dynamic=d.dynamic_sampling, prompts_per_step=P)
    with_advantages = partial(stages.with_advantages, put=policy.put,
                              ppo_prepare=updates.ppo_prepare, estimator=a.adv_estimator,
                              eps=a.adv_eps)
    next_kl_coef = partial(stages.next_kl_coef, target=a.ppo.kl_target, horizon=a.ppo.kl_horizon)
    sampler_flops = perf.sampler_flops_per_row(policy.model, policy_params(
        state.params, ref_params), setup.prompt_len, setup.max_new_tokens)
    utilisation = partial(stages.utilisation, sampler_flops_per_row=sampler_flops,
                          chunks=cfg.verifier.overlap_chunks,
                          max_new_tokens=setup.max_new_tokens,
                          devices=policy.mesh.devices.flatten().tolist())

    last = min(cfg.num_steps, loop.step + cfg.stop_after_steps) if cfg.stop_after_steps \
        else cfg.num_steps
    update_flops = 0.0
    for step in range(loop.step, last):
        if stop_requested():  # it came during the warm start or an evaluation: stop here
            if step > 0:
                ckpt.maybe_save(step, state, loop, force=True)
            last = step
            break
        t0 = time.perf_counter()
        key = jax.random.fold_in(rl_key, step)
        problems, prompt_B_L, pmask_B_L = prompts(step)                                # host
        params = policy_params(state.params, ref_params)  # with LoRA: base + adapters
        rollout, verdicts, learned_B, t_sample, t_verify, verified = sample_and_verify(
            params, problems, prompt_B_L, pmask_B_L, key)                # jit (+ RM) | host
        t2 = time.perf_counter()
        fresh = score(verdicts, rollout, prompt_B_L, pmask_B_L, learned_B)             # rewards
        groups, carry, n_real, ds_row = select(loop.carry, fresh)                      # DAPO
        batch, adv_row = with_advantages(groups, n_real, state.params, ref_params,
                                         loop.kl_coef)                                 # host | jit
        update_args = (state, ref_params, batch, jax.random.fold_in(update_key, step),
                       float(step >= a.ppo.critic_warmup_steps))
        # Shapes are fixed for the run: count once, tracing before the call (which reuses it).
        update_flops = update_flops or perf.traced_flops(updates.rl_step, *update_args)
        t_rl = time.perf_counter()
        state, metrics = updates.rl_step(*update_args)                                 # jit
        metrics = jax.device_get(metrics)  # the one device-to-host copy of the update
        t3 = time.perf_counter()
        times = StepTimes(t_sample, t_verify, t3 - t2, t3 - t0, t3 - t_rl)
        kl_coef = next_kl_coef(loop.kl_coef, adv_row)                                  # host
        row = ({f"train/{k}": float(v) for k, v in metrics.items()}
               | rewards.summary(verdicts, fresh.rewards_P_G)
               | rewards.learned_summary(verdicts, learned_B)
               | stages.timing(times, rollout.mask_B_R)
               | utilisation(update_flops, times, rollout.mask_B_R)
               | ds_row | adv_row | {"train/kl_coef": kl_coef}
               | {f"compiles/{k}": v for k, v in traces.items()}
               | {f"verify/samples_process_{i}": n for i, n in enumerate(verified)})
        tracker.log(step + 1, row)                                                     # log
        tracker.advance({"acc": row["reward/accuracy"], "kl": row["train/approx_kl_old"]})
        if not cfg.logger.progress_bar:  # a compact line per step instead of the bar
            tracker.write(f"step {step + 1}/{cfg.num_steps}  reward {row['reward/mean']:.3f}  "
                          f"acc {row['reward/accuracy']:.3f}  kl {row['train/approx_kl_old']:.4f}"
                          f"  {row['time/step_s']:.2f}s")
        loop = LoopState(step + 1, (step + 1) * sampled, loop.rng_key, kl_coef, carry)
        stopping = stop_requested()                                                    # SIGTERM
        if ckpt.maybe_save(step + 1, state, loop, force=step + 1 == last or stopping):  # checkpoint
            write_wall(start.wall_before + time.perf_counter() - t_start)
        if stopping:
            last = step + 1
            break
        if (cfg.eval.every_steps and (step + 1) % cfg.eval.every_steps == 0
                and step + 1 < cfg.num_steps):  # the last step gets the final evaluation
            tracker.log(step + 1, {f"eval/{k}": v for k, v in
                                   held_out(policy_params(state.params, ref_params),
                                            eval_key).items()})

    if last < cfg.num_steps or stop_requested():
        ckpt.close()  # waits for the checkpoint being written
        write_wall(start.wall_before + time.perf_counter() - t_start)
        why = stop.requested or "stop_after_steps"
        tracker.write(f"stopped after step {last} ({why}); checkpoint in {ckpt.directory}; "
                      "rerun the same command to resume")
        tracker.close()
        return {"stopped_at_step": last, "reason": why}
    eval_end = held_out(policy_params(state.params, ref_params), eval_key)
    tracker.log(cfg.num_steps, {f"eval/{k}": v for k, v in eval_end.items()})
    ckpt.close()
    wall = start.wall_before + time.perf_counter() - t_start
    write_wall(wall)
    summary = {
        "eval/sampled_accuracy_start": start.eval_start["sampled_accuracy"],
        "eval/sampled_accuracy_end": eval_end["sampled_accuracy"],
        "eval/greedy_accuracy_start": start.eval_start["greedy_accuracy"],
        "eval/greedy_accuracy_end": eval_end["greedy_accuracy"],
        "train/wall_seconds": wall,
        "train/steps": cfg.num_steps,
        "compiles": dict(traces),
    } | {f"eval/sampled_learned_reward_{when}": e["sampled_learned_reward"]  # the proxy
         for when, e in (("start", start.eval_start), ("end", eval_end))
         if "sampled_learned_reward" in e}
    if distributed.is_writer():
        with open(os.path.join(cfg.run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    tracker.summary({k: summary[k] for k in SUMMARY_KEYS})
    tracker.write(format_table(summary, cfg.eval.num_problems, cfg.eval.sampled_per_problem,
                               cfg.num_steps))
    tracker.close()
    return summary


def format_table(summary: dict, num_problems: int, sampled_per_problem: int,
                 num_steps: int) -> str:
    s = summary
    learned = ([f"{'  reward model score (sampled)':<40}"
                f"{s['eval/sampled_learned_reward_start']:10.3f} "
                f"{s['eval/sampled_learned_reward_end']:6.3f}"]
               if "eval/sampled_learned_reward_end" in s else [])
    return "\n".join([
        f"held-out accuracy ({num_problems} problems)      before RL     end",
        f"  greedy                                {s['eval/greedy_accuracy_start']:10.3f} "
        f"{s['eval/greedy_accuracy_end']:6.3f}",
        f"  sampled (T=1, {sampled_per_problem}/problem)               "
        f"{s['eval/sampled_accuracy_start']:10.3f} {s['eval/sampled_accuracy_end']:6.3f}",
        *learned,
        f"wall time {s['train/wall_seconds']:.0f}s for {num_steps} RL steps; "
        f"compiles {s['compiles']}",
    ])
