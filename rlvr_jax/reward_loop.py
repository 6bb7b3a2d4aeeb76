"""`job=reward_model`: train a reward model on preference pairs, as `loop.py` trains a policy.

    warm policy (model.path, or the supervised warm start) -> reward model (its trunk + a zero
    head) -> Bradley-Terry steps on the task's procedural pairs -> held-out pairwise accuracy
    -> summary

The same run directory, lock, stop signals, checkpoints (and exact resume), metrics and
one-writer rules as an RL run. Pairs come from `tasks/preference_pairs.py` (a correct and a
wrong response, labels flipped with probability `reward_model.label_noise`): the gold label
stays known, so the held-out accuracy is reported both against the noisy labels and against
the truth.
"""

from __future__ import annotations

import dataclasses
import json
import os
from functools import partial

import jax
import numpy as np

from rlvr_jax import (batching, build, distributed, optim, sharding, tracking, train_step,
                      warmstart)
from rlvr_jax.checkpoint import Checkpointer, abstract_like
from rlvr_jax.config import RunConfig, as_dict, warmstart_key
from rlvr_jax.models import reward
from rlvr_jax.tasks.preference_pairs import LabelledPair, heldout_pairs, procedural_pairs
from rlvr_jax.types import LoopState


def run(cfg: RunConfig, setup: build.TaskSetup, stop_requested, traces: build.Traces) -> dict:
    cfg = dataclasses.replace(cfg, model=setup.model_cfg)  # resolved: later runs read it
    r, w, pr = cfg.reward_model, cfg.warmup, cfg.preferences
    policy = build.policy(setup, cfg.mesh, cfg.sampling, traces)
    build.check_batches(policy.mesh, {"preferences.pairs_per_step": pr.pairs_per_step,
                                      "warmup.sequences_per_step": w.sequences_per_step})
    updates = build.updates(policy, setup, cfg.algo, w, cfg.sampling.temperature,
                            cfg.num_steps, traces)  # its SFT step: the warm start
    if distributed.is_writer():
        with open(os.path.join(cfg.run_dir, "run_config.json"), "w") as f:
            json.dump(as_dict(cfg), f, indent=2)
    ckpt = Checkpointer(cfg.run_dir, cfg.checkpoint.every_steps, cfg.checkpoint.max_to_keep,
                        os.path.join(w.shared_dir, warmstart_key(cfg)) if w.shared_dir else None)
    tracker = tracking.for_process(
        distributed.is_writer(), cfg.run_dir, mode=cfg.logger.mode, project=cfg.logger.project,
        entity=cfg.logger.entity, name=cfg.name, config=as_dict(cfg), total_steps=r.steps,
        progress_bar=cfg.logger.progress_bar)
    warm = warmstart.warm_params(policy, setup, updates, warmup=w, seed=cfg.seed, ckpt=ckpt,
                                 tracker=tracker, should_stop=stop_requested)
    tx, lr = optim.make_optimizer(optim.OptimizerSettings(
        learning_rate=r.learning_rate, warmup_steps=r.lr_warmup_steps, total_steps=r.steps,
        schedule="cosine", b1=0.9, b2=0.999, weight_decay=0.0, max_grad_norm=1.0))
    key = jax.random.key(cfg.seed)
    state = optim.init_train_state(
        reward.init_reward_model(setup.model_cfg, warm, jax.random.fold_in(key, 7)), tx)
    state = jax.device_put(state, policy.shardings(state))
    loop = LoopState(0, 0, np.asarray(jax.random.key_data(key)), 0.0, None)
    latest = ckpt.latest_step()
    if latest is not None:
        state, loop = ckpt.restore(latest, abstract_like(state))
        tracker.write(f"RESUMING from checkpoint step {latest} in {ckpt.directory} "
                      f"({r.steps - loop.step} of {r.steps} steps left)")
    tracker.truncate_after(loop.step)
    repl = sharding.replicated(policy.mesh)
    step_fn = train_step.make_reward_model_step(
        policy.model, tx, lr, state_sharding=policy.shardings(state), metrics_sharding=repl,
        margin=r.margin, label_smoothing=r.label_smoothing,
        on_trace=build.counter(traces, "reward_model_step"))
    encode = partial(_encode, setup.tokenizer, prompt_len=setup.prompt_len,
                     max_new_tokens=setup.max_new_tokens)
    pairs = partial(procedural_pairs, setup.task, seed=cfg.seed, count=pr.pairs_per_step,
                    label_noise=pr.label_noise, max_offset=pr.max_offset)

    tracker.start_at(loop.step)
    last = min(r.steps, loop.step + cfg.stop_after_steps) if cfg.stop_after_steps else r.steps
    for step in range(loop.step, last):
        batch_pairs = pairs(batch_index=step)                                   # host
        state, metrics = step_fn(state, policy.put(encode(batch_pairs)))       # jit
        metrics = jax.device_get(metrics)
        row = {f"rm/{k}": float(v) for k, v in metrics.items()} | {
            "rm/labels_agreeing_with_gold": float(np.mean([p.gold_agrees for p in batch_pairs])),
            "compiles/reward_model_step": traces["reward_model_step"]}
        tracker.log(step + 1, row)                                             # log
        tracker.advance({"acc": row["rm/accuracy"], "loss": row["rm/loss"]})
        loop = LoopState(step + 1, (step + 1) * pr.pairs_per_step, loop.rng_key, 0.0, None)
        stopping = stop_requested()
        ckpt.maybe_save(step + 1, state, loop, force=step + 1 == last or stopping)  # checkpoint
        if stopping:
            last = step + 1
            break
    ckpt.close()
    if last < r.steps:
        tracker.write(f"stopped after step {last}; checkpoint in {ckpt.directory}; rerun the "
                      "same command to resume")
        tracker.close()
        return {"stopped_at_step": last}
    held = heldout_accuracy(policy.model, state.params, setup.task, encode, policy.put,
                            cfg.seed, pr)
    summary = {"rm/heldout_gold_accuracy": held["gold"],
               "rm/heldout_label_accuracy": held["labels"],
               "rm/label_noise": pr.label_noise, "train/steps": r.steps,
               "compiles": dict(traces)}
    tracker.log(r.steps, {k: v for k, v in summary.items() if k != "compiles"})
    if distributed.is_writer():
        with open(os.path.join(cfg.run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    tracker.write(f"reward model: held-out pairwise accuracy {held['gold']:.3f} against the "
                  f"truth, {held['labels']:.3f} against labels flipped at {pr.label_noise:g} "
                  f"(labels agree with the truth {1 - pr.label_noise:.2f} of the time)")
    tracker.close()
    return summary


def _encode(tokenizer, pairs: list[LabelledPair], *, prompt_len: int, max_new_tokens: int):
    return batching.pair_batch(tokenizer, [p.prompt for p in pairs], [p.chosen for p in pairs],
                               [p.rejected for p in pairs], prompt_len, max_new_tokens)


def heldout_accuracy(model, params, task, encode, put, seed: int, r) -> dict:
    """Pairwise accuracy on held-out pairs, in batches of `pairs_per_step` (the last one
    padded): how often the chosen side outscores the rejected one, against the noisy labels
    and against the gold criterion."""
    pairs = heldout_pairs(task, seed=seed, count=r.heldout_pairs, label_noise=r.label_noise,
                          max_offset=r.max_offset)
    score = jax.jit(lambda p, t, m: reward.scores(model, p, t, m))
    wins = []
    for start in range(0, len(pairs), r.pairs_per_step):
        chunk = pairs[start: start + r.pairs_per_step]
        padded = chunk + [chunk[0]] * (r.pairs_per_step - len(chunk))
        b = put(encode(padded))
        rc = distributed.to_host(score(params, b.chosen_B_T, b.chosen_mask_B_T))
        rr = distributed.to_host(score(params, b.rejected_B_T, b.rejected_mask_B_T))
        wins += list((rc > rr)[: len(chunk)])
    wins = np.asarray(wins)
    gold = np.array([p.gold_agrees for p in pairs])
    return {"labels": float(wins.mean()), "gold": float(np.mean(wins == gold))}
