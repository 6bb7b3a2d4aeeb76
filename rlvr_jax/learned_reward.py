"""A trained reward model as a reward source (`reward.source=reward_model|combined`), or as a
watched proxy beside the verifier (`reward.source=verifier` with `reward.reward_model_dir`).

The reward model is a finished `job=reward_model` run (preference_runs.py): its last checkpoint's
{"trunk", "head"} params and the model config it recorded. It scores the policy's own tokens,
so it must share the policy's tokenizer (checked here). Its params are held on the mesh in the
compute dtype, frozen; scoring is one jitted forward per sampler chunk (prompt ++ response,
the score read at the last real token, models/reward.py) on the sampler's device arrays,
dispatched before the host verifies the chunk, and one device-to-host copy of the scores.

Simplified: the reward model is read once at start and never trained further (no on-line
reward-model updates, as in most RLHF pipelines after InstructGPT).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import partial
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax import distributed
from rlvr_jax.build import Policy, TaskSetup, Traces, counter, reference_params
from rlvr_jax.checkpoint import CheckpointError, read_params
from rlvr_jax.config import ConfigError, recorded_model_config
from rlvr_jax.models import reward
from rlvr_jax.models.policy import Decoder
from rlvr_jax.tokenizer import load_pretrained_tokenizer, load_tokenizer

KEY = "reward.reward_model_dir"


@dataclass(frozen=True)
class LearnedReward:
    params: object  # {"trunk", "head"} on the mesh, compute dtype, frozen
    # jitted (params, prompt_B_L, pmask_B_L, tokens_B_R, mask_B_R) -> r_B, on device arrays:
    score_train: Callable  # the RL loop's sampler chunks
    score_eval: Callable  # the same for evaluation batches (another shape: its own compile)
    steps: int  # the reward model's training steps (its checkpoint)


def _fail(run_dir: str, why: str) -> ConfigError:
    return ConfigError(f"config key '{KEY}': {run_dir}: {why}")


def _recorded_config(run_dir: str) -> dict:
    path = os.path.join(run_dir, "run_config.json")
    if not os.path.exists(path):
        raise _fail(run_dir, "no run_config.json: not a run directory (+experiment=math_rm "
                    "trains a reward model)")
    with open(path) as f:
        recorded = json.load(f)
    if recorded.get("job") != "reward_model":
        raise _fail(run_dir, f"a job={recorded.get('job')} run, not a reward model")
    summary = os.path.join(run_dir, "summary.json")
    if not os.path.exists(summary):
        raise _fail(run_dir, "its training has not finished (no summary.json): rerun its "
                    "command to complete it")
    return recorded


def _tokenizer_of(run_dir: str, model: dict):
    if model.get("path"):
        return load_pretrained_tokenizer(model["path"])
    return load_tokenizer(os.path.join(run_dir, "tokenizer"))


def load(run_dir: str, setup: TaskSetup, policy: Policy, traces: Traces) -> LearnedReward:
    """The reward model of the finished reward-model run in `run_dir`, placed on the policy's
    mesh. Bad input (not a run, unfinished, another tokenizer) is one ConfigError naming
    `reward.reward_model_dir`."""
    run_dir = os.path.abspath(run_dir)
    recorded = _recorded_config(run_dir)
    model_cfg = recorded_model_config(recorded["model"])
    if _tokenizer_of(run_dir, recorded["model"]).get_vocab() != setup.tokenizer.get_vocab():
        raise _fail(run_dir, "its tokenizer differs from the policy's; a reward model scores "
                    "the policy's tokens, so both need the same vocabulary")
    try:
        params, steps = read_params(run_dir)
    except CheckpointError as e:
        raise _fail(run_dir, str(e)) from e
    if set(params) != {"trunk", "head"}:
        raise _fail(run_dir, f"its checkpoint holds {sorted(params)}, not a reward model")
    vocab = model_cfg.vocab_size or len(setup.tokenizer)
    model = Decoder(model_cfg, vocab)
    params = reference_params(params, model_cfg.compute_dtype)  # frozen: no f32 copy
    params = jax.device_put(params, policy.shardings(params))

    def scorer(name: str):
        on_trace = counter(traces, name)

        def score(p, prompt_B_L, pmask_B_L, tokens_B_R, mask_B_R):
            on_trace()
            tokens_B_T = jnp.concatenate([prompt_B_L, tokens_B_R], axis=1)
            mask_B_T = jnp.concatenate([pmask_B_L, mask_B_R.astype(pmask_B_L.dtype)], axis=1)
            return reward.scores(model, p, tokens_B_T, mask_B_T)

        return jax.jit(score)

    return LearnedReward(params, scorer("reward_model_score"),
                         scorer("reward_model_score_eval"), steps)


def maybe_load(run_dir: str, setup: TaskSetup, policy: Policy,
               traces: Traces) -> Optional[LearnedReward]:
    return load(run_dir, setup, policy, traces) if run_dir else None


def eval_scorer(learned: Optional[LearnedReward], put: Callable) -> Optional[Callable]:
    """`(prompt_B_L, pmask_B_L, tokens_B_R, mask_B_R) -> r_B` for evaluation, or None."""
    return None if learned is None else partial(scores, learned.score_eval, learned.params, put)


def train_scorer(learned: Optional[LearnedReward]) -> Optional[Callable]:
    """`(prompt_B_L, pmask_B_L, tokens_B_R, mask_B_R) -> r_B` on the sampler's device arrays
    (no host round trip; dispatched asynchronously, so it runs while the host verifies), or
    None."""
    return None if learned is None else partial(learned.score_train, learned.params)


def scores(score: Callable, params, put: Callable, prompt_B_L: np.ndarray,
           pmask_B_L: np.ndarray, tokens_B_R: np.ndarray, mask_B_R: np.ndarray) -> np.ndarray:
    """r_B (host, float32) of B responses given as host arrays: prompt ++ response through
    the jitted `score`, the batch sharded like the sampler's."""
    return np.asarray(distributed.to_host(score(params, put(prompt_B_L), put(pmask_B_L),
                                                put(tokens_B_R), put(mask_B_R))), np.float32)
