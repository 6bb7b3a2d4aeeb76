"""`job=reward_model` and `job=dpo`: learning from preference pairs. Siblings of the RL job
(loop.py) over the same run scaffold (run_scaffold.py: run directory, lock, stop signals,
checkpoints and exact resume, metrics and one-writer rules).

    warm policy (model.path, or the supervised warm start) ->
      reward_model: its trunk + a zero head, Bradley-Terry steps (Ouyang et al. 2022)
      dpo:          the policy, DPO steps against itself frozen (Rafailov et al. 2023),
                    held-out task accuracy before, during and after, as an RL run reports it
    -> held-out pairwise accuracy -> summary

Pairs come from `tasks/preference_pairs.py` (a correct and a wrong response, labels flipped
with probability `preferences.label_noise`); a seed gives both jobs the same pairs. The gold
label stays known, so pairwise accuracy is reported against the noisy labels and against the
truth. DPO is offline: every pair is seen once, and its reference log-probs are computed once,
when its batch is drawn.
"""

from __future__ import annotations

import dataclasses
import os
import time
from functools import partial
from typing import Callable, NamedTuple, Optional

import jax
import numpy as np

from rlvr_jax import (batching, build, distributed, learned_reward, optim, preference_steps,
                      run_scaffold, sharding, warmstart)
from rlvr_jax.checkpoint import Checkpointer
from rlvr_jax.config import RunConfig
from rlvr_jax.models import reward
from rlvr_jax.tasks.dataset import make_render
from rlvr_jax.tasks.preference_pairs import (LabelledPair, PairSource, file_pairs, file_source,
                                             procedural_source)
from rlvr_jax.types import LoopState, PairBatch
from rlvr_jax.verify.verifiers import fleet_for, make_verifier


class PairJob(NamedTuple):
    """What differs between the two jobs; `run` does the rest."""

    prefix: str  # metric prefix: "rm" | "dpo"
    steps: int
    state: object  # the fresh train state (params {"trunk", "head"} | {"policy"})
    step: Callable  # jitted (state, PairBatch) -> (state, metrics), state donated
    prepare: Callable  # device PairBatch -> PairBatch (DPO: + reference log-probs; jit)
    margins: Callable  # (params, PairBatch) -> m_B: > 0 when the chosen side wins
    evaluate: Optional[Callable]  # params -> held-out task metrics (DPO), or None


def run(cfg: RunConfig, session: run_scaffold.Session) -> dict:
    """A preference job, inside the run scaffold (run_scaffold.run(cfg, jobs) calls it)."""
    traces = build.Traces()
    setup = build.run_task_setup(cfg)
    cfg = dataclasses.replace(cfg, model=setup.model_cfg)  # resolved: later runs read it
    w, pr, dpo = cfg.warmup, cfg.preferences, cfg.job == "dpo"
    policy = build.policy(setup, cfg.mesh, cfg.sampling, traces)
    build.check_batches(policy.mesh, {"preferences.pairs_per_step": pr.pairs_per_step}
                        | ({"warmup.sequences_per_step": w.sequences_per_step}
                           if w.steps else {})
                        | ({"eval.sequences_per_batch": cfg.eval.sequences_per_batch}
                           if dpo and cfg.eval.num_problems else {}))
    sft = build.warmup(policy, setup, w, traces)  # the warm start's step
    # Bad files and a bad reward-model directory fail here, before the warm start.
    source = pair_source(pr, setup, cfg.seed)
    learned = learned_reward.maybe_load(cfg.reward.reward_model_dir, setup, policy, traces) \
        if dpo else None  # DPO's evaluations report its proxy score too
    ckpt, tracker = run_scaffold.outputs(cfg)
    tracker.write(f"run dir {os.path.abspath(cfg.run_dir)} | job {cfg.job} | devices "
                  f"{policy.mesh.devices.size} ({jax.default_backend()}) | "
                  f"{pr.pairs_per_step} pairs a step | processes {jax.process_count()}")
    stop_requested = session.stop_requested
    warm = warmstart.warm_params(policy, setup, sft, warmup=w, seed=cfg.seed, ckpt=ckpt,
                                 tracker=tracker, should_stop=stop_requested)
    if not dpo:
        return _train(cfg, setup, policy, ckpt, tracker, session, traces, source,
                      _reward_model_job(cfg, policy, warm, traces))
    v = cfg.verifier
    fleet = fleet_for(v.backend, cfg.fleet, cfg.run_dir)  # None: pools on this host
    verifier = make_verifier(v.kind, workers=v.workers, timeout_s=v.timeout_s,
                             batch_timeout_s=v.batch_timeout_s, mode=v.mode, fleet=fleet)
    extra = build.extra_sets(setup, v, lambda own, name: build.generators(
        policy, own, cfg.sampling, name=name), fleet)  # eval.extra_sets: own slots, samplers
    try:
        evaluate = partial(warmstart.held_out_accuracy,
                           build.generators(policy, setup, cfg.sampling), setup, verifier,
                           cfg.eval, policy.put, key=warmstart.eval_key(cfg.seed),
                           score=learned_reward.eval_scorer(learned, policy.put), extra=extra,
                           say=tracker.write)
        return _train(cfg, setup, policy, ckpt, tracker, session, traces, source,
                      _dpo_job(cfg, setup, policy, warm, traces, evaluate,
                               source.prompt_len))
    finally:
        for closing in [verifier] + [x.verifier for x in extra]:
            closing.close()


def _adam(learning_rate: float, warmup_steps: int, steps: int):
    """Both jobs' optimizer: Adam, linear warm-up then cosine decay, gradients clipped at 1."""
    return optim.make_optimizer(optim.OptimizerSettings(
        learning_rate=learning_rate, warmup_steps=warmup_steps, total_steps=steps,
        schedule="cosine", b1=0.9, b2=0.999, weight_decay=0.0, max_grad_norm=1.0))


def _reward_model_job(cfg: RunConfig, policy: build.Policy, warm, traces) -> PairJob:
    r = cfg.reward_model
    tx, lr = _adam(r.learning_rate, r.lr_warmup_steps, r.steps)
    state = optim.init_train_state(reward.init_reward_model(
        policy.model.cfg, warm, jax.random.fold_in(jax.random.key(cfg.seed), 7)), tx)
    state = jax.device_put(state, policy.shardings(state))
    step = preference_steps.make_reward_model_step(
        policy.model, tx, lr, state_sharding=policy.shardings(state),
        metrics_sharding=sharding.replicated(policy.mesh), margin=r.margin,
        label_smoothing=r.label_smoothing, on_trace=build.counter(traces, "reward_model_step"))
    score = jax.jit(lambda p, t, m: reward.scores(policy.model, p, t, m))
    margins = lambda p, b: (score(p, b.chosen_B_T, b.chosen_mask_B_T)
                            - score(p, b.rejected_B_T, b.rejected_mask_B_T))
    return PairJob("rm", r.steps, state, step, lambda b: b, margins, None)


def _dpo_job(cfg: RunConfig, setup: build.TaskSetup, policy: build.Policy, warm, traces,
             evaluate: Callable, prompt_len: int) -> PairJob:
    """DPO on pairs laid out with `prompt_len` prompt slots (the task's, or the files')."""
    d = cfg.dpo
    tx, lr = _adam(d.learning_rate, d.lr_warmup_steps, d.steps)
    state = optim.init_train_state({"policy": warm}, tx)
    state = jax.device_put(state, policy.shardings(state))
    ref = build.reference_params(warm, setup.model_cfg.compute_dtype)
    step = preference_steps.make_dpo_step(
        policy.model, tx, lr, prompt_len=prompt_len, beta=d.beta,
        label_smoothing=d.label_smoothing, state_sharding=policy.shardings(state),
        metrics_sharding=sharding.replicated(policy.mesh),
        on_trace=build.counter(traces, "dpo_step"))
    with_ref = preference_steps.make_with_reference_logp(
        policy.model, prompt_len=prompt_len,
        on_trace=build.counter(traces, "dpo_reference_logp"))
    logp = jax.jit(partial(preference_steps.pair_logp, policy.model, prompt_len=prompt_len))

    def margins(params, batch: PairBatch):
        """The implicit reward's margin / beta: (log-ratio of chosen) - (log-ratio of
        rejected)."""
        lc, lr_ = logp(params["policy"], batch)
        b = with_ref(ref, batch)
        return (lc - b.ref_logp_chosen_B) - (lr_ - b.ref_logp_rejected_B)

    return PairJob("dpo", d.steps, state, step, partial(with_ref, ref), margins,
                   (lambda params: evaluate(params["policy"])) if cfg.eval.num_problems
                   else None)  # eval.num_problems=0: no held-out task evaluation


def _train(cfg: RunConfig, setup: build.TaskSetup, policy: build.Policy, ckpt: Checkpointer,
           tracker, session: run_scaffold.Session, traces, source: PairSource,
           job: PairJob) -> dict:
    pr, e, p = cfg.preferences, cfg.eval, job.prefix
    stop_requested = session.stop_requested
    eval_start = job.evaluate and warmstart.start_evaluation(
        cfg.run_dir, tracker, lambda: job.evaluate(job.state.params))
    state, loop, wall_before = run_scaffold.resume(ckpt, tracker, job.state,
                                                   run_scaffold.fresh_loop(cfg.seed),
                                                   cfg.run_dir, job.steps)
    write_wall = run_scaffold.wall_writer(cfg.run_dir)
    wall = lambda: wall_before + time.perf_counter() - session.t_start
    encode = partial(_encode, setup.tokenizer, prompt_len=source.prompt_len,
                     max_new_tokens=setup.max_new_tokens)

    tracker.start_at(loop.step)
    last = run_scaffold.last_step(loop.step, job.steps, cfg.stop_after_steps)
    for step in range(loop.step, last):
        batch_pairs = source.batch(step)                                       # host
        batch = job.prepare(policy.put(encode(batch_pairs)))                   # jit (DPO: ref)
        state, metrics = job.step(state, batch)                                # jit
        metrics = jax.device_get(metrics)
        row = ({f"{p}/{k}": float(v) for k, v in metrics.items()}
               | _gold_row(p, batch_pairs) | {f"compiles/{k}": v for k, v in traces.items()})
        tracker.log(step + 1, row)                                             # log
        tracker.advance({"acc": row[f"{p}/accuracy"], "loss": row[f"{p}/loss"]})
        if not cfg.logger.progress_bar and ((step + 1) % 50 == 0 or step + 1 == last):
            tracker.write(f"step {step + 1}/{job.steps}  loss {row[f'{p}/loss']:.4f}  "
                          f"pair acc. {row[f'{p}/accuracy']:.3f}")
        loop = LoopState(step + 1, (step + 1) * pr.pairs_per_step, loop.rng_key, 0.0, None)
        stopping = stop_requested()
        if ckpt.maybe_save(step + 1, state, loop, force=step + 1 == last or stopping):
            write_wall(wall())                                                 # checkpoint
        if stopping:
            last = step + 1
            break
        if (job.evaluate and e.every_steps and (step + 1) % e.every_steps == 0
                and step + 1 < job.steps):  # the last step gets the final evaluation
            result = job.evaluate(state.params)
            tracker.log(step + 1, {f"eval/{k}": v for k, v in result.items()})
            tracker.write(run_scaffold.eval_line(step + 1, result))
    tracker.end_progress()
    if last < job.steps:
        return run_scaffold.stopped(ckpt, tracker, write_wall, wall(), last, None)
    ckpt.close()
    held = heldout_accuracy(job.margins, state.params, source.heldout, encode, policy.put,
                            pr.pairs_per_step)
    summary = {f"{p}/heldout_label_accuracy": held["labels"]} | (
        {f"{p}/heldout_gold_accuracy": held["gold"], f"{p}/label_noise": pr.label_noise}
        if "gold" in held else {})
    if job.evaluate:
        end = job.evaluate(state.params)
        tracker.log(job.steps, {f"eval/{k}": v for k, v in end.items()})
        summary |= {f"eval/{k}_{when}": r[k] for k in ("sampled_accuracy", "greedy_accuracy")
                    for when, r in (("start", eval_start), ("end", end))}
    write_wall(wall())
    summary |= {"train/wall_seconds": wall(), "train/steps": job.steps, "compiles": dict(traces)}
    tracker.log(job.steps, {k: v for k, v in summary.items() if k != "compiles"})
    run_scaffold.write_summary(cfg.run_dir, summary)
    what = "reward model" if p == "rm" else "DPO implicit reward"
    if "gold" in held:
        tracker.write(f"{what}: held-out pairwise accuracy {held['gold']:.3f} against the "
                      f"truth, {held['labels']:.3f} against labels flipped at "
                      f"{pr.label_noise:g} (labels agree with the truth "
                      f"{1 - pr.label_noise:.2f} of the time)")
    else:
        tracker.write(f"{what}: held-out pairwise accuracy {held['labels']:.3f} on "
                      f"{len(source.heldout)} pairs of {pr.test_path}")
    if job.evaluate:
        tracker.write(f"held-out task accuracy: sampled "
                      f"{summary['eval/sampled_accuracy_start']:.3f}"
                      f" -> {summary['eval/sampled_accuracy_end']:.3f}, greedy "
                      f"{summary['eval/greedy_accuracy_start']:.3f} -> "
                      f"{summary['eval/greedy_accuracy_end']:.3f}")
    tracker.close()
    return summary


def _encode(tokenizer, pairs: list[LabelledPair], *, prompt_len: int, max_new_tokens: int):
    return batching.pair_batch(tokenizer, [p.prompt for p in pairs], [p.chosen for p in pairs],
                               [p.rejected for p in pairs], prompt_len, max_new_tokens)


def _gold_row(prefix: str, pairs: list[LabelledPair]) -> dict:
    """The share of a batch's labels that agree with the gold criterion, when it is known."""
    if pairs[0].gold_agrees is None:
        return {}
    return {f"{prefix}/labels_agreeing_with_gold": float(np.mean([x.gold_agrees
                                                                  for x in pairs]))}


def pair_source(pr, setup: build.TaskSetup, seed: int) -> PairSource:
    """The run's preference pairs: the task's procedural ones, or the files'."""
    if not pr.train_path:
        return procedural_source(setup.task, seed=seed, count=pr.pairs_per_step,
                                 label_noise=pr.label_noise, max_offset=pr.max_offset,
                                 heldout=pr.heldout_pairs, prompt_len=setup.prompt_len)
    count = lambda text: len(setup.tokenizer.encode(text, add_special_tokens=False))
    load = partial(file_pairs, fmt=pr.format, on_bad_row=pr.on_bad_row,
                   render=make_render(setup.tokenizer, ""), count_tokens=count,
                   max_response_tokens=setup.max_new_tokens)
    train, test = load(pr.train_path), load(pr.test_path)
    return file_source(train, test, seed=seed, count=pr.pairs_per_step,
                       prompt_len=max(count(p.prompt) for p in train + test))


def heldout_accuracy(margins: Callable, params, pairs: list[LabelledPair], encode, put,
                     batch: int) -> dict:
    """Pairwise accuracy on held-out pairs, in batches of `batch` (the last one padded): how
    often the chosen side wins (margin > 0), against the labels and, when known, against the
    gold criterion."""
    wins = []
    for start in range(0, len(pairs), batch):
        chunk = pairs[start: start + batch]
        padded = chunk + [chunk[0]] * (batch - len(chunk))
        m = distributed.to_host(margins(params, put(encode(padded))))
        wins += list((m > 0)[: len(chunk)])
    wins = np.asarray(wins)
    out = {"labels": float(wins.mean())}
    if pairs[0].gold_agrees is not None:
        out["gold"] = float(np.mean(wins == np.array([p.gold_agrees for p in pairs])))
    return out
