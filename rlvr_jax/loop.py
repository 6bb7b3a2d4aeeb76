"""The RL loop. Every host side effect (logging, checkpoints, files) lives in this file.

    warm start (SFT on imperfect demonstrations) -> evaluate -> RL steps -> evaluate -> summary

One RL step, one stage per line: sample (jit) -> verify (host) -> rewards -> advantages ->
update (jit, donated) -> log -> checkpoint. Rerunning the same command in the same run directory
resumes from the last checkpoint (and says so); it never silently restarts at step 0.
"""

from __future__ import annotations

import json
import os
import time

import jax
import numpy as np

from rlvr_jax import (advantages, batching, components, dynamic_sampling, evaluation, rewards,
                      train_step, warmstart)
from rlvr_jax.checkpoint import Checkpointer, abstract_like
from rlvr_jax.models import hf
from rlvr_jax.config import RunConfig, as_dict, warmstart_key
from rlvr_jax.tasks.arithmetic import repeat_each
from rlvr_jax.tracking import Tracker
from rlvr_jax.dynamic_sampling import Groups
from rlvr_jax.types import LoopState, Rollout

SUMMARY_KEYS = ("eval/sampled_accuracy_start", "eval/sampled_accuracy_end",
                "eval/greedy_accuracy_start", "eval/greedy_accuracy_end", "train/wall_seconds")


def evaluate(c: components.Components, cfg: RunConfig, params, key) -> dict:
    """Greedy and sampled (T=1) held-out accuracy, with pass@k / mean@k / maj@k for k up to
    `eval.sampled_per_problem` and status counts: the code `python -m rlvr_jax.evaluate` runs."""
    problems = c.task.heldout_set(cfg.eval.num_problems)
    common = dict(prompt_len=c.prompt_len, batch_size=cfg.eval.sequences_per_batch, put=c.put,
                  verify=c.verify, key=key)
    answer_of = getattr(c.task, "answer_of", lambda s: s.strip() or None)
    n = cfg.eval.sampled_per_problem
    ks = sorted({1, n} | {k for k in (2, 4, 8, 16) if k < n})
    cache = c.new_cache(cfg.eval.sequences_per_batch)
    cache, v, texts = evaluation.sample_and_verify(c.sample_greedy, cache, params, c.task,
                                                   c.tokenizer, problems, samples_per_problem=1,
                                                   **common)
    greedy = evaluation.report(problems, v, texts, 1, answer_of)
    _, v, texts = evaluation.sample_and_verify(c.sample_eval, cache, params, c.task, c.tokenizer,
                                               problems, samples_per_problem=n, **common)
    sampled = evaluation.report(problems, v, texts, n, answer_of, ks)
    return {"greedy_accuracy": greedy["accuracy"], "sampled_accuracy": sampled["accuracy"],
            **{f"sampled_{k}": val for k, val in sampled.items() if k != "by_source"}}


def _warm_start(c, cfg: RunConfig, key, tracker: Tracker):
    """Supervised warm-up from freshly initialised params; returns the warm params."""
    w = cfg.warmup
    state = train_step.init_train_state(c.init_params(key), c.sft_tx)
    state = jax.device_put(state, c.state_sharding(state))  # as the step's out_shardings: 1 compile
    make = lambda i: warmstart.demonstration_batch(
        c.task, c.tokenizer, seed=cfg.seed, batch_index=i, count=w.sequences_per_step,
        wrong_fraction=w.wrong_fraction, max_offset=w.wrong_max_offset, prompt_len=c.prompt_len,
        max_new_tokens=c.max_new_tokens)
    t0 = time.perf_counter()

    def on_log(i, metrics):
        metrics = jax.device_get(metrics)
        tracker.write(f"warm-up step {i}/{w.steps}  loss {float(metrics['loss']):.4f}  "
                      f"{time.perf_counter() - t0:.0f}s")
        tracker.log(0, {f"warmup/{k}": v for k, v in metrics.items()} | {"warmup/step": i})

    state = warmstart.run_warmup(c.sft_step, state, make, w.steps, c.put, on_log)
    return state.params


def _start_or_resume(c, cfg: RunConfig, ckpt: Checkpointer, tracker: Tracker):
    """(rl_state, loop_state, ref_params, eval_start, wall_seconds_before)."""
    base_key = jax.random.key(cfg.seed)
    eval_path = os.path.join(cfg.run_dir, "eval_start.json")
    shapes = jax.eval_shape(c.init_params, base_key)
    abstract_params = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                                   shapes, c.state_sharding(shapes))
    if cfg.model.path:  # pretrained weights: no warm start
        warm = jax.device_put(hf.load(cfg.model.path, cfg.model)[1],
                              jax.tree.map(lambda a: a.sharding, abstract_params))
        tracker.write(f"loaded {cfg.model.path} ({cfg.model.num_layers} layers, hidden "
                      f"{cfg.model.hidden_size}); no warm start")
    elif ckpt.has_warmstart():
        warm = ckpt.restore_warmstart(abstract_params)
        tracker.write(f"found warm-start params in {ckpt.warmstart_dir}; skipping the warm-up")
    else:
        warm = _warm_start(c, cfg, jax.random.fold_in(base_key, 1), tracker)
        ckpt.save_warmstart(warm)
    if os.path.exists(eval_path):
        with open(eval_path) as f:
            eval_start = json.load(f)
    else:
        eval_start = evaluate(c, cfg, warm, jax.random.fold_in(base_key, 2))  # = eval_key in run()
        with open(eval_path, "w") as f:
            json.dump(eval_start, f)
    tracker.log(0, {f"eval/{k}": v for k, v in eval_start.items()})
    state = train_step.init_train_state(c.init_rl_params(warm, jax.random.fold_in(base_key, 4)),
                                        c.rl_tx)
    state = jax.device_put(state, c.state_sharding(state))
    loop = LoopState(0, 0, np.asarray(jax.random.key_data(base_key)), cfg.algo.kl_coef, None)
    wall_before = 0.0
    latest = ckpt.latest_step()
    if latest is not None:
        state, loop = ckpt.restore(latest, abstract_like(state))
        wall_before = _read_wall(cfg.run_dir)
        tracker.write(f"RESUMING from checkpoint step {latest} in {ckpt.directory} "
                      f"({cfg.num_steps - loop.step} of {cfg.num_steps} steps left)")
    return state, loop, warm, eval_start, wall_before


def _read_wall(run_dir: str) -> float:
    path = os.path.join(run_dir, "wall_seconds.json")
    if not os.path.exists(path):
        return 0.0
    with open(path) as f:
        return float(json.load(f)["wall_seconds"])


def run(cfg: RunConfig) -> dict:
    t_start = time.perf_counter()
    os.makedirs(cfg.run_dir, exist_ok=True)
    c = components.build(cfg)
    try:
        return _run(cfg, c, t_start)
    finally:
        c.close()  # verifier workers


def _run(cfg: RunConfig, c: components.Components, t_start: float) -> dict:
    a, P, G = cfg.algo, cfg.algo.prompts_per_step, cfg.algo.samples_per_prompt
    with open(os.path.join(cfg.run_dir, "run_config.json"), "w") as f:
        json.dump(as_dict(cfg), f, indent=2)  # resolved (model read from model.path): for export
    shared = cfg.warmup.shared_dir
    ckpt = Checkpointer(cfg.run_dir, cfg.checkpoint.every_steps, cfg.checkpoint.max_to_keep,
                        os.path.join(shared, warmstart_key(cfg)) if shared else None)
    tracker = Tracker(cfg.run_dir, mode=cfg.logger.mode, project=cfg.logger.project,
                      entity=cfg.logger.entity, name=cfg.name, config=as_dict(cfg),
                      total_steps=cfg.num_steps, progress_bar=cfg.logger.progress_bar)
    tracker.write(f"run dir {os.path.abspath(cfg.run_dir)} | devices {c.mesh.devices.size} "
                  f"({jax.default_backend()}) mesh {dict(c.mesh.shape)} | batch {P}x{G}="
                  f"{P * G} sequences | prompt {c.prompt_len} + response {c.max_new_tokens} tokens")
    state, loop, ref_params, eval_start, wall_before = _start_or_resume(c, cfg, ckpt, tracker)
    tracker.start_at(loop.step)
    base_key = jax.random.wrap_key_data(loop.rng_key)
    rl_key, eval_key = jax.random.fold_in(base_key, 3), jax.random.fold_in(base_key, 2)
    update_key = jax.random.fold_in(base_key, 5)
    cache = c.new_cache(c.sampled_prompts * G // cfg.verifier.overlap_chunks)

    last = cfg.num_steps if not cfg.stop_after_steps else min(cfg.num_steps,
                                                                loop.step + cfg.stop_after_steps)
    for step in range(loop.step, last):
        t0 = time.perf_counter()
        problems, prompt_B_P, pmask_B_P = _prompts(c, cfg, step)                          # host
        cache, rollout, verdicts, t_sample, t_verify = _sample_and_verify(                # jit | host
            c, cfg, state.params["policy"], cache, problems, prompt_B_P, pmask_B_P,
            jax.random.fold_in(rl_key, step))
        t2 = time.perf_counter()
        fresh = _score(c, cfg, verdicts, prompt_B_P, pmask_B_P, rollout)   # rewards, DAPO shaping
        groups, carry, n_real, ds_row = _select(cfg, loop.carry, fresh)    # dynamic sampling
        batch, adv_row = _advantages(c, cfg, state, ref_params, groups, n_real, loop.kl_coef)
        state, metrics = c.rl_step(state, ref_params, batch, jax.random.fold_in(update_key, step),
                                   float(step >= a.critic_warmup_steps))                # jit
        metrics = jax.device_get(metrics)  # the one device-to-host copy of the update
        t3 = time.perf_counter()
        kl_coef = _next_kl_coef(cfg, loop.kl_coef, adv_row)
        row = {f"train/{k}": float(v) for k, v in metrics.items()} | rewards.summary(
            verdicts, fresh.rewards_K_G) | _timing(t_sample, t_verify, t3 - t2, t3 - t0,
                                                   rollout.mask_B_N) | ds_row | {
            f"compiles/{k}": v for k, v in c.traces.items()} | adv_row | {"train/kl_coef": kl_coef}
        tracker.log(step + 1, row)
        tracker.advance({"acc": row["reward/accuracy"], "kl": row["train/approx_kl_old"]})
        loop = LoopState(step + 1, (step + 1) * c.sampled_prompts, loop.rng_key, kl_coef, carry)
        if ckpt.maybe_save(step + 1, state, loop, force=step + 1 == last):
            _write_wall(cfg.run_dir, wall_before + time.perf_counter() - t_start)
        if cfg.eval.every_steps and (step + 1) % cfg.eval.every_steps == 0:
            mid = evaluate(c, cfg, state.params["policy"], eval_key)
            tracker.log(step + 1, {f"eval/{k}": v for k, v in mid.items()})

    if last < cfg.num_steps:
        ckpt.close()
        _write_wall(cfg.run_dir, wall_before + time.perf_counter() - t_start)
        tracker.write(f"stopping after step {last} (stop_after_steps); rerun to resume")
        tracker.close()
        return {"stopped_at_step": last}
    eval_end = evaluate(c, cfg, state.params["policy"], eval_key)
    tracker.log(cfg.num_steps, {f"eval/{k}": v for k, v in eval_end.items()})
    ckpt.close()
    wall = wall_before + time.perf_counter() - t_start
    _write_wall(cfg.run_dir, wall)
    summary = {
        "eval/sampled_accuracy_start": eval_start["sampled_accuracy"],
        "eval/sampled_accuracy_end": eval_end["sampled_accuracy"],
        "eval/greedy_accuracy_start": eval_start["greedy_accuracy"],
        "eval/greedy_accuracy_end": eval_end["greedy_accuracy"],
        "train/wall_seconds": wall,
        "train/steps": cfg.num_steps,
        "compiles": dict(c.traces),
    }
    with open(os.path.join(cfg.run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    tracker.summary({k: summary[k] for k in SUMMARY_KEYS})
    tracker.write(format_table(summary, cfg))
    tracker.close()
    return summary


def _prompts(c, cfg: RunConfig, step: int):
    """This step's problems and their prompts (host arrays), each repeated G times (P_G)."""
    problems = c.task.train_batch(cfg.seed, step, c.sampled_prompts)
    g = cfg.algo.samples_per_prompt
    prompt, mask = batching.encode_prompts(c.tokenizer, [c.task.prompt(p) for p in problems],
                                           c.prompt_len)
    return problems, np.repeat(prompt, g, axis=0), np.repeat(mask, g, axis=0)


def _score(c, cfg: RunConfig, verdicts, prompt_B_P, pmask_B_P, rollout) -> Groups:
    """Rewards from the verdicts' table, plus DAPO's overlong shaping. Samples the verifier
    failed on (sandbox errors) leave the loss mask, as do truncated responses if asked.
    Returns the rollout as groups (host)."""
    a, n, g = cfg.algo, c.max_new_tokens, cfg.algo.samples_per_prompt
    weights_B = rewards.loss_weights(verdicts)  # 0: the verifier failed (sandbox error)
    rewards_B = rewards.impute_invalid(
        rewards.from_verdicts(verdicts, cfg.verifier.reward_scheme).reshape(-1, g),
        weights_B.reshape(-1, g)).reshape(-1)
    cut_B = batching.truncated(rollout.tokens_B_N, rollout.mask_B_N, c.tokenizer.eos_token_id)
    if a.overlong_buffer_tokens:
        lengths_B = rollout.mask_B_N.sum(axis=1) + cut_B  # a cut response counts as > budget
        rewards_B = rewards_B + np.asarray(advantages.overlong_penalty(
            lengths_B, n, a.overlong_buffer_tokens, a.overlong_penalty_factor))
    loss_mask_B_N = rollout.mask_B_N * weights_B[:, None] * (
        ~cut_B[:, None] if a.mask_truncated else 1.0)
    return batching.groups_from_rollout(prompt_B_P, pmask_B_P, rollout.tokens_B_N,
                                        rollout.logp_B_N, rollout.mask_B_N, loss_mask_B_N,
                                        rewards_B, a.samples_per_prompt)


def _select(cfg: RunConfig, carry, fresh: Groups):
    """(update groups, next carry, number of real groups, stats). Identity without dynamic
    sampling; see rlvr_jax/dynamic_sampling.py."""
    a = cfg.algo
    if not a.dynamic_sampling:
        return fresh, None, fresh.num, {}
    groups, carry, stats = dynamic_sampling.select(carry, fresh, a.prompts_per_step,
                                                   a.prompts_per_step)
    return groups, carry, int(stats["dynamic/real_groups"]), stats


def _advantages(c, cfg: RunConfig, state, ref_params, groups: Groups, n_real: int,
                kl_coef: float):
    """Device TrainBatch with advantages: a group estimator over the real groups (host), or
    the critic + GAE (jit) for PPO. Padding groups get advantage 0 (and have no loss mask)."""
    a = cfg.algo
    if c.ppo_prepare is None:
        adv_K_G = np.zeros_like(groups.rewards_K_G)
        if n_real:
            adv_K_G[:n_real] = np.asarray(advantages.from_rewards(
                groups.rewards_K_G[:n_real], a.adv_estimator, a.adv_eps))
        return c.put(batching.train_batch(groups, adv_K_G.reshape(-1))), {}
    batch, metrics = c.ppo_prepare(state.params, ref_params, c.put(batching.train_batch(groups)),
                                   c.put(groups.rewards_K_G.reshape(-1)), np.float32(kl_coef))
    return batch, {f"ppo/{k}": float(v) for k, v in jax.device_get(metrics).items()}


def _next_kl_coef(cfg: RunConfig, kl_coef: float, adv_row: dict) -> float:
    a = cfg.algo
    if a.kl_target <= 0:
        return kl_coef
    return advantages.adaptive_kl_coef(kl_coef, adv_row["ppo/kl_ref_per_seq"], a.kl_target,
                                       a.kl_horizon)


def _sample_and_verify(c, cfg: RunConfig, params, cache, problems, prompt_B_P, pmask_B_P, key):
    """Sample the step's batch in `verifier.overlap_chunks` chunks with the same params
    (on-policy) and hand each chunk to the verifier as soon as it is decoded, so chunk k is
    verified (worker processes) while chunk k+1 is sampled (jit). Returns (cache, rollout,
    verdicts, seconds blocked on sampling, seconds waiting for verdicts after the last chunk)."""
    k_chunks, g = cfg.verifier.overlap_chunks, cfg.algo.samples_per_prompt
    b = prompt_B_P.shape[0] // k_chunks
    problems_B = list(repeat_each(problems, g))
    parts, futures, t_sample = [], [], 0.0
    for k in range(k_chunks):
        t0 = time.perf_counter()
        rows = slice(k * b, (k + 1) * b)
        cache, part = c.sample_train(params, cache, c.put(prompt_B_P[rows]),
                                     c.put(pmask_B_P[rows]),
                                     key if k_chunks == 1 else jax.random.fold_in(key, k))
        part = jax.device_get(part)
        t_sample += time.perf_counter() - t0
        texts = batching.decode_responses(c.tokenizer, part.tokens_B_N, part.mask_B_N)
        futures.append(c.submit(problems_B[rows], texts))
        parts.append(part)
    t0 = time.perf_counter()
    verdicts = [v for f in futures for v in f.result()]
    rollout = Rollout(*(np.concatenate(x) for x in zip(*parts)))
    return cache, rollout, verdicts, t_sample, time.perf_counter() - t0


def _timing(sample_s: float, verify_s: float, update_s: float, step_s: float,
            mask_B_N: np.ndarray) -> dict:
    """Phase times of one step and generation throughput. With overlap, `verify_s` is only
    the wait after the last chunk was sampled."""
    tokens = float(mask_B_N.sum())
    return {"time/sample_s": sample_s, "time/verify_s": verify_s, "time/update_s": update_s,
            "time/step_s": step_s, "response/length_mean": tokens / mask_B_N.shape[0],
            "throughput/generated_tokens_per_s": tokens / sample_s}


def _write_wall(run_dir: str, seconds: float) -> None:
    with open(os.path.join(run_dir, "wall_seconds.json"), "w") as f:
        json.dump({"wall_seconds": seconds}, f)


def format_table(summary: dict, cfg: RunConfig) -> str:
    s = summary
    return "\n".join([
        f"held-out accuracy ({cfg.eval.num_problems} problems)      before RL     end",
        f"  greedy                                {s['eval/greedy_accuracy_start']:10.3f} "
        f"{s['eval/greedy_accuracy_end']:6.3f}",
        f"  sampled (T=1, {cfg.eval.sampled_per_problem}/problem)               "
        f"{s['eval/sampled_accuracy_start']:10.3f} {s['eval/sampled_accuracy_end']:6.3f}",
        f"wall time {s['train/wall_seconds']:.0f}s for {cfg.num_steps} RL steps; "
        f"compiles {s['compiles']}",
    ])
