"""The stages of one RL step, each a function the loop calls on one line (rlvr_jax/loop.py):
prompts -> sample | verify -> score -> select -> advantages; plus the KL controller update and
the step's timing row. Host-side glue around the jitted pieces in `components`."""

from __future__ import annotations

import time

import jax
import numpy as np

from rlvr_jax import advantages, batching, dynamic_sampling, rewards
from rlvr_jax.config import RunConfig
from rlvr_jax.dynamic_sampling import Groups
from rlvr_jax.tasks.arithmetic import repeat_each
from rlvr_jax.types import Rollout


def prompts(c, cfg: RunConfig, step: int):
    """This step's problems and their prompts (host arrays), each repeated G times (P_G)."""
    problems = c.task.train_batch(cfg.seed, step, c.sampled_prompts)
    g = cfg.algo.samples_per_prompt
    prompt, mask = batching.encode_prompts(c.tokenizer, [c.task.prompt(p) for p in problems],
                                           c.prompt_len)
    return problems, np.repeat(prompt, g, axis=0), np.repeat(mask, g, axis=0)


def score(c, cfg: RunConfig, verdicts, prompt_B_P, pmask_B_P, rollout) -> Groups:
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


def select(cfg: RunConfig, carry, fresh: Groups):
    """(update groups, next carry, number of real groups, stats). Identity without dynamic
    sampling; see rlvr_jax/dynamic_sampling.py."""
    a = cfg.algo
    if not a.dynamic_sampling:
        return fresh, None, fresh.num, {}
    groups, carry, stats = dynamic_sampling.select(carry, fresh, a.prompts_per_step,
                                                   a.prompts_per_step)
    return groups, carry, int(stats["dynamic/real_groups"]), stats


def with_advantages(c, cfg: RunConfig, state, ref_params, groups: Groups, n_real: int,
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


def next_kl_coef(cfg: RunConfig, kl_coef: float, adv_row: dict) -> float:
    a = cfg.algo
    if a.kl_target <= 0:
        return kl_coef
    return advantages.adaptive_kl_coef(kl_coef, adv_row["ppo/kl_ref_per_seq"], a.kl_target,
                                       a.kl_horizon)


def sample_and_verify(c, cfg: RunConfig, params, problems, prompt_B_P, pmask_B_P, key):
    """Sample the step's batch in `verifier.overlap_chunks` chunks with the same params
    (on-policy) and hand each chunk to the verifier as soon as it is decoded, so chunk k is
    verified (worker processes) while chunk k+1 is sampled (jit). Returns (rollout,
    verdicts, seconds blocked on sampling, seconds waiting for verdicts after the last chunk)."""
    k_chunks, g = cfg.verifier.overlap_chunks, cfg.algo.samples_per_prompt
    b = prompt_B_P.shape[0] // k_chunks
    problems_B = list(repeat_each(problems, g))
    parts, futures, t_sample = [], [], 0.0
    for k in range(k_chunks):
        t0 = time.perf_counter()
        rows = slice(k * b, (k + 1) * b)
        part = c.sample_train(params, c.put(prompt_B_P[rows]), c.put(pmask_B_P[rows]),
                              key if k_chunks == 1 else jax.random.fold_in(key, k))
        part = jax.device_get(part)
        t_sample += time.perf_counter() - t0
        texts = batching.decode_responses(c.tokenizer, part.tokens_B_N, part.mask_B_N)
        futures.append(c.submit(problems_B[rows], texts))
        parts.append(part)
    t0 = time.perf_counter()
    verdicts = [v for f in futures for v in f.result()]
    rollout = Rollout(*(np.concatenate(x) for x in zip(*parts)))
    return rollout, verdicts, t_sample, time.perf_counter() - t0


def timing(sample_s: float, verify_s: float, update_s: float, step_s: float,
            mask_B_N: np.ndarray) -> dict:
    """Phase times of one step and generation throughput. With overlap, `verify_s` is only
    the wait after the last chunk was sampled."""
    tokens = float(mask_B_N.sum())
    return {"time/sample_s": sample_s, "time/verify_s": verify_s, "time/update_s": update_s,
            "time/step_s": step_s, "response/length_mean": tokens / mask_B_N.shape[0],
            "throughput/generated_tokens_per_s": tokens / sample_s}
