"""The RL loop. Every host side effect (logging, checkpoints, files) lives in this file.

    warm start (SFT on imperfect demonstrations, or HF weights) -> evaluate -> RL steps ->
    evaluate -> summary

One RL step, one stage per line (stages in rlvr_jax/stages.py): prompts -> sample (jit) |
verify (worker processes, overlapping) -> rewards -> dynamic sampling -> advantages ->
update (jit, donated) -> log -> checkpoint. Rerunning the same command in the same run directory
resumes from the last checkpoint (and says so); it never silently restarts at step 0.
"""

from __future__ import annotations

import json
import os
import time

import jax
import numpy as np

from rlvr_jax import components, evaluation, rewards, stages, train_step, warmstart
from rlvr_jax.checkpoint import Checkpointer, abstract_like
from rlvr_jax.models import hf
from rlvr_jax.config import RunConfig, as_dict, warmstart_key
from rlvr_jax.tracking import Tracker
from rlvr_jax.types import LoopState

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
    v, texts = evaluation.sample_and_verify(c.sample_greedy, params, c.task, c.tokenizer,
                                            problems, samples_per_problem=1, **common)
    greedy = evaluation.report(problems, v, texts, 1, answer_of)
    v, texts = evaluation.sample_and_verify(c.sample_eval, params, c.task, c.tokenizer,
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

    last = cfg.num_steps if not cfg.stop_after_steps else min(cfg.num_steps,
                                                                loop.step + cfg.stop_after_steps)
    for step in range(loop.step, last):
        t0 = time.perf_counter()
        key = jax.random.fold_in(rl_key, step)
        problems, prompt_B_P, pmask_B_P = stages.prompts(c, cfg, step)                  # host
        rollout, verdicts, t_sample, t_verify = stages.sample_and_verify(
            c, cfg, state.params["policy"], problems, prompt_B_P, pmask_B_P, key)  # jit | host
        t2 = time.perf_counter()
        fresh = stages.score(c, cfg, verdicts, prompt_B_P, pmask_B_P, rollout)  # rewards, DAPO
        groups, carry, n_real, ds_row = stages.select(cfg, loop.carry, fresh)   # dynamic sampling
        batch, adv_row = stages.with_advantages(c, cfg, state, ref_params, groups, n_real,
                                                loop.kl_coef)                    # host | jit (PPO)
        state, metrics = c.rl_step(state, ref_params, batch, jax.random.fold_in(update_key, step),
                                   float(step >= a.critic_warmup_steps))         # jit
        metrics = jax.device_get(metrics)  # the one device-to-host copy of the update
        t3 = time.perf_counter()
        kl_coef = stages.next_kl_coef(cfg, loop.kl_coef, adv_row)               # host
        row = ({f"train/{k}": float(v) for k, v in metrics.items()}
               | rewards.summary(verdicts, fresh.rewards_K_G)
               | stages.timing(t_sample, t_verify, t3 - t2, t3 - t0, rollout.mask_B_N)
               | ds_row | adv_row | {"train/kl_coef": kl_coef}
               | {f"compiles/{k}": v for k, v in c.traces.items()})
        tracker.log(step + 1, row)
        tracker.advance({"acc": row["reward/accuracy"], "kl": row["train/approx_kl_old"]})
        loop = LoopState(step + 1, (step + 1) * c.sampled_prompts, loop.rng_key, kl_coef, carry)
        if ckpt.maybe_save(step + 1, state, loop, force=step + 1 == last):
            _write_wall(cfg.run_dir, wall_before + time.perf_counter() - t_start)
        if (cfg.eval.every_steps and (step + 1) % cfg.eval.every_steps == 0
                and step + 1 < cfg.num_steps):  # the last step gets the final evaluation
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
