"""The stages of one RL step, each a function the loop calls on one line (rlvr_jax/loop.py):
prompts -> sample | verify -> score (begun and finished by rollouts.take, at the step or
ahead of it) -> select -> advantages; plus the KL controller and the step's timing row.
Host-side glue around the jitted pieces; each takes the values it uses
(the loop binds the run's settings once with functools.partial)."""

from __future__ import annotations

import time
from typing import Callable, NamedTuple, Optional, Sequence

import jax
import numpy as np

from rlvr_jax import (advantages, batching, distributed, dynamic_sampling, perf, rewards,
                      step_groups)
from rlvr_jax.generate import overrule
from rlvr_jax.rollouts import Made, Started
from rlvr_jax.tasks.base import Task, repeat_each, tool_contexts
from rlvr_jax.types import Groups, Rollout, StepTimes, Verdict
from rlvr_jax.verify.verifiers import Verifier


def prompts(task: Task, tokenizer, step: int, *, seed: int, prompts_per_step: int,
            samples_per_prompt: int, prompt_len: int):
    """This step's problems and their prompts (host arrays), each repeated G times (P_G)."""
    problems = task.train_batch(seed, step, prompts_per_step)
    prompt, mask = batching.encode_prompts(tokenizer, [task.prompt(p) for p in problems],
                                           prompt_len)
    g = samples_per_prompt
    return problems, np.repeat(prompt, g, axis=0), np.repeat(mask, g, axis=0)


def sources(problems: Sequence, samples_per_prompt: int) -> list:
    """Each sequence's data source (P_G order; None for problems without one)."""
    return repeat_each([getattr(p, "data_source", None) for p in problems], samples_per_prompt)


class Sampled(NamedTuple):
    """One step's rollout with its verdicts (host), from `finish_sampling`."""

    rollout: Rollout  # host arrays [B, R], in P_G order (per-turn rewards inside)
    verdicts: list  # one Verdict per sequence
    learned_B: Optional[np.ndarray]  # float32 reward-model scores, or None without one
    sample_s: float  # seconds blocked on the sampler
    verify_wait_s: float  # seconds waiting for verdicts after the last chunk was sampled
    verified: list  # samples each process verified (several processes: distributed.py)
    stats: dict  # episode metrics (multi-turn), {} for one turn


class Selected(NamedTuple):
    """The groups the update trains on, from `select` (dynamic sampling or the identity)."""

    groups: Groups
    carry: Optional[Groups]  # informative groups kept for the next step
    n_real: int  # groups that are real (the rest pad the batch to its static shape)
    stats: dict  # dynamic/* metrics


class Sampling(NamedTuple):
    """A batch sampled and handed to the verifier, its verdicts not yet waited for
    (`start_sampling`; `finish_sampling` waits)."""

    parts: list  # each chunk's Generated
    futures: list  # each chunk's verifier future
    scores: list  # each chunk's reward-model scores (device), or empty
    sample_s: float  # seconds blocked on the sampler


def start_sampling(generate: Callable, put: Callable, verifier: Verifier, task: Task,
                   score: Optional[Callable], params, problems: Sequence, prompt_B_L,
                   pmask_B_L, key, *, chunks: int, samples_per_prompt: int) -> Sampling:
    """Generate the step's batch in `chunks` chunks with the same params (one sampler call,
    or multi-turn episodes; generate.py) and hand each chunk to the verifier as soon as it is
    made, so chunk k is verified (worker processes) while chunk k+1 is generated. With a
    reward model, `score` (learned_reward.train_scorer) is dispatched on each chunk's device
    arrays, so it runs while the host verifies. Returns without waiting for the verdicts:
    what runs between this and `finish_sampling` (the update, with asynchronous rollouts)
    overlaps the verification."""
    b = prompt_B_L.shape[0] // chunks
    problems_B = repeat_each(problems, samples_per_prompt)
    parts, futures, scores = [], [], []
    t_sample = 0.0
    for k in range(chunks):
        t0 = time.perf_counter()
        rows = slice(k * b, (k + 1) * b)
        # One key for the step, each sequence its own stream (sampling.sequence_uniforms):
        # the chunking changes when a sequence is sampled, not what.
        part = generate(params, prompt_B_L[rows], pmask_B_L[rows], key,
                        tool_contexts(task, problems_B[rows]), np.arange(k * b, (k + 1) * b))
        if score is not None:  # asynchronous: the device scores while the host verifies
            dev = part.device or Rollout(*(None if x is None else put(x)
                                           for x in part.rollout))
            scores.append(score(put(prompt_B_L[rows]), put(pmask_B_L[rows]), dev.tokens_B_R,
                                dev.mask_B_R))
        t_sample += time.perf_counter() - t0
        mine = distributed.my_rows(b)
        futures.append(verifier.submit(task.verify_jobs(problems_B[rows][mine], part.texts)))
        parts.append(part)
    return Sampling(parts, futures, scores, t_sample)


def finish_sampling(s: Sampling) -> Sampled:
    """Wait for a started batch's verdicts. Over several processes each verified the rows
    its own devices sampled (distributed.py) and the verdicts are gathered here. An
    episode's environment verdict (its world's final state; SANDBOX_ERROR when its sandbox
    failed, masked out of the loss, never a wrong answer) overrules the task's verifier."""
    t0 = time.perf_counter()
    gathered = [distributed.gather_verdicts(overrule(f.result(), part.verdicts))
                for f, part in zip(s.futures, s.parts)]
    verdicts = [v for chunk, _ in gathered for v in chunk]
    verified = [sum(counts) for counts in zip(*(c for _, c in gathered))]
    rollout = Rollout.concat([p.rollout for p in s.parts])
    learned_B = np.concatenate([np.asarray(distributed.to_host(r), np.float32)
                                for r in s.scores]) if s.scores else None
    return Sampled(rollout, verdicts, learned_B, s.sample_s, time.perf_counter() - t0, verified,
                   _mean_rows([p.stats for p in s.parts]))


def sample_and_verify(*args, **kwargs) -> Sampled:
    """`start_sampling`, then `finish_sampling`: the batch and its verdicts."""
    return finish_sampling(start_sampling(*args, **kwargs))


def _mean_rows(rows: Sequence[dict]) -> dict:
    """The chunks' metrics, averaged (equal chunks)."""
    return {k: float(np.mean([r[k] for r in rows if k in r])) for k in rows[0]} if rows else {}


def score(verdicts: Sequence[Verdict], rollout: Rollout, prompt_B_L, pmask_B_L,
          learned_B: Optional[np.ndarray], *, source: str, components: Sequence[str],
          weights: Sequence[float], eos_id: int, reward_scheme: str, samples_per_prompt: int,
          max_new_tokens: int,
          overlong_buffer_tokens: int, overlong_penalty_factor: float,
          mask_truncated: bool) -> Groups:
    """Rewards as the weighted sum of the run's named `components` (rewards.component_names,
    `weights` aligned): by `source` (config.RewardConfig) the verdicts' table (`correct`),
    whether an answer could be read (`format`), the task's own parts, the reward model's
    scores `learned_B` (`learned`); DAPO's overlong shaping (`length`); an environment's
    per-turn rewards (`turns`) stay at their tokens (the rollout's `turn_rewards_B_R`, times
    their weight, kept apart from the outcome: Groups.returns_P_G sums them). Each component
    is kept (Groups.components_P_G_C: GDPO normalises them one by one). The loss mask starts
    from the rollout's own (the policy's tokens: never an environment's); samples the
    verifier failed on (sandbox errors) leave it when the verifier's reward is used, as do
    truncated responses if asked; their verifier components are imputed from their group
    (rewards.impute_invalid). Returns the rollout as groups (host)."""
    assert rollout.loss_mask_B_R is not None, "a rollout without a loss mask"
    g, b = samples_per_prompt, len(verdicts)
    weights_B = np.ones(b, np.float32)
    if source != "reward_model":
        weights_B = rewards.loss_weights(verdicts)  # 0: the verifier failed (sandbox error)
    imputed = lambda x_B: rewards.impute_invalid(x_B.reshape(-1, g),
                                                 weights_B.reshape(-1, g)).reshape(-1)
    cut_B = batching.truncated(rollout.tokens_B_R, rollout.mask_B_R, eos_id)
    # A masked sample (its verifier failed) keeps no per-turn reward either: its imputed
    # reward stands in for it in the group baseline.
    turn_rewards_B_R = rollout.turn_rewards() * (weights_B[:, None] > 0)

    def value(name: str) -> np.ndarray:
        if name == "correct":
            return imputed(rewards.from_verdicts(verdicts, reward_scheme))
        if name == "format":
            return imputed(rewards.formatted(verdicts))
        if name == "learned":
            return np.asarray(learned_B, np.float32)
        if name == "length":
            lengths_B = rollout.mask_B_R.sum(axis=1) + cut_B  # a cut response is > budget
            return np.asarray(advantages.overlong_penalty(
                lengths_B, max_new_tokens, overlong_buffer_tokens, overlong_penalty_factor))
        if name == "turns":
            return turn_rewards_B_R.sum(axis=1).astype(np.float32)
        return imputed(rewards.part(verdicts, name))  # a task's own

    components_B_C = np.stack([value(n) for n in components], axis=1).astype(np.float32)
    rewards_B = np.zeros(b, np.float32)
    for i, (name, w) in enumerate(zip(components, weights)):
        if name != "turns" and w != 0.0:  # the turns' stay at their tokens
            rewards_B = rewards_B + (components_B_C[:, i] if w == 1.0 else
                                     np.float32(w) * components_B_C[:, i])
    w_turns = dict(zip(components, weights)).get("turns", 1.0)
    turn_rewards_B_R = turn_rewards_B_R * np.float32(w_turns)
    loss_mask_B_R = rollout.loss_mask_B_R * weights_B[:, None] * (
        ~cut_B[:, None] if mask_truncated else 1.0)
    return batching.groups_from_rollout(prompt_B_L, pmask_B_L, rollout.tokens_B_R,
                                        rollout.logp_B_R, rollout.mask_B_R, loss_mask_B_R,
                                        rewards_B, g, turn_rewards_B_R, components_B_C)


def select(carry: Optional[Groups], fresh: Groups, *, dynamic: bool,
           prompts_per_step: int) -> Selected:
    """The update's groups: the identity without dynamic sampling; see
    rlvr_jax/dynamic_sampling.py."""
    if not dynamic:
        return Selected(fresh, None, fresh.num, {})
    groups, carry, stats = dynamic_sampling.select(carry, fresh, prompts_per_step,
                                                   prompts_per_step)
    return Selected(groups, carry, int(stats["dynamic/real_groups"]), stats)


def with_advantages(groups: Groups, n_real: int, params, ref_params, kl_coef: float, *,
                    put: Callable, ppo_prepare: Optional[Callable], estimator: str,
                    eps: float, weights: Sequence[float] = (), step_weight: float = 0.0,
                    step_gamma: float = 1.0, step_scale_by_std: bool = True):
    """Device TrainBatch with advantages: a group estimator over the real groups' returns
    (host; GDPO over their components, `weights` aligned), plus `step_weight` x GiGPO's
    step-level advantages when > 0 (rlvr_jax/step_groups.py), or the critic + GAE over
    per-token rewards (jit) for PPO. Padding groups get advantage 0 (and have no loss
    mask)."""
    if ppo_prepare is None:
        adv_P_G = np.zeros_like(groups.rewards_P_G)
        if n_real:
            comps = None if groups.components_P_G_C is None else groups.components_P_G_C[:n_real]
            adv_P_G[:n_real] = np.asarray(advantages.from_rewards(
                groups.returns_P_G[:n_real], estimator, eps, comps, tuple(weights)))
        if step_weight <= 0:
            return put(batching.train_batch(groups, adv_P_G.reshape(-1))), {}
        real = groups.take(np.arange(n_real))
        step_P_G_R = np.zeros_like(groups.loss_mask_P_G_R)
        step_P_G_R[:n_real], metrics = step_groups.step_advantages(
            real.tokens_P_G_R, real.loss_mask_P_G_R, real.rewards_P_G, real.turn_rewards_P_G_R,
            gamma=step_gamma, eps=eps, scale_by_std=step_scale_by_std)
        adv_B_R = (adv_P_G[:, :, None] * groups.loss_mask_P_G_R
                   + np.float32(step_weight) * step_P_G_R).reshape(-1, step_P_G_R.shape[-1])
        return put(batching.train_batch(groups, adv_B_R)), metrics
    batch, metrics = ppo_prepare(params, ref_params, put(batching.train_batch(groups)),
                                 put(groups.rewards_P_G.reshape(-1)),
                                 put(groups.flat().turn_rewards_P_G_R), np.float32(kl_coef))
    return batch, {f"ppo/{k}": float(v) for k, v in jax.device_get(metrics).items()}


def next_kl_coef(kl_coef: float, adv_row: dict, *, target: float, horizon: int) -> float:
    """The adaptive KL controller's next coefficient (fixed when `target` is 0)."""
    if target <= 0:
        return kl_coef
    return advantages.adaptive_kl_coef(kl_coef, adv_row["ppo/kl_ref_per_seq"], target, horizon)


def timing(t: StepTimes, mask_B_R: np.ndarray) -> dict:
    """Phase times of one step and generation throughput. With overlap, `verify_s` is only
    the wait after the last chunk was sampled."""
    tokens = float(mask_B_R.sum())
    return {"time/sample_s": t.sample_s, "time/verify_s": t.verify_s,
            "time/update_s": t.update_s, "time/step_s": t.step_s,
            "response/length_mean": tokens / mask_B_R.shape[0],
            "throughput/generated_tokens_per_s": tokens / t.sample_s}


def utilisation(update_flops: float, t: StepTimes, mask_B_R: np.ndarray, *,
                sampler_flops_per_row: tuple[float, float], chunks: int, max_new_tokens: int,
                devices, group_size: int = 1) -> dict:
    """Achieved TFLOP/s and MFU (rlvr_jax/perf.py) of the update and of the sampler: the
    update's counted FLOPs over the jitted update's time, the rollout's (prefill + the decode
    forwards it ran) over the time blocked on sampling. No MFU on a device of unknown peak."""
    sample_flops = perf.rollout_flops(sampler_flops_per_row,
                                      perf.decode_steps(mask_B_R, chunks, max_new_tokens),
                                      group_size)
    row = {}
    for name, flops, seconds in (("update", update_flops, t.rl_step_s),
                                 ("sample", sample_flops, t.sample_s)):
        row[f"perf/tflops_{name}"] = flops / seconds / 1e12
        mfu = perf.mfu(flops, seconds, devices)
        if mfu is not None:
            row[f"perf/mfu_{name}"] = mfu
    return row


def begin(step: int, params, version: int, *, prompts: Callable, start: Callable,
          sampler_params: Callable, key) -> Started:
    """Start batch `step` (rollouts.take's `begin`): its prompts, sampled with `params` (the
    state's, or a snapshot; `sampler_params` makes the tree the sampler runs) under the
    step's key, and handed to the verifier."""
    problems, prompt_B_L, pmask_B_L = prompts(step)
    return Started(problems, prompt_B_L, pmask_B_L,
                   start(sampler_params(params), problems, prompt_B_L, pmask_B_L,
                         jax.random.fold_in(key, step)), version)


def inputs(step: int, *, prompts: Callable, task: Task, key, samples_per_prompt: int):
    """Batch `step`'s sampler inputs ahead of its `begin` (a carried stream queues them,
    carry.py): (prompt_B_L, pmask_B_L, the step's key, the rows' task contexts)."""
    problems, prompt_B_L, pmask_B_L = prompts(step)
    return (prompt_B_L, pmask_B_L, jax.random.fold_in(key, step),
            tool_contexts(task, repeat_each(problems, samples_per_prompt)))


def finish(started: Started, *, score: Callable) -> Made:
    """Wait for a started batch's verdicts and score it (rollouts.take's `finish`)."""
    sampled = finish_sampling(started.sampling)
    groups = score(sampled.verdicts, sampled.rollout, started.prompt_B_L, started.pmask_B_L,
                   sampled.learned_B)
    return Made(started.problems, started.prompt_B_L, started.pmask_B_L, sampled, groups,
                started.version)
