"""On-policy distillation (Agarwal et al. 2024, GKD, arXiv:2306.13649; Thinking Machines,
"On-Policy Distillation", 2025): the student samples, a frozen teacher scores the student's
own tokens, and the per-token reverse KL

    KL_t = log pi_student(y_t | y_<t) - log pi_teacher(y_t | y_<t)      (y ~ pi_student)

teaches it where its samples go wrong, densely, on the states it actually visits. Its
gradient, with each token's own term only (discount 0, as both references use), is the
policy gradient with per-token reward -KL_t. Two ways in (train_step.Distill):

    reward  A_t += coef * (log pi_teacher - log pi_sampler)(y_t): a dense reward beside the
            verifier's advantage, through the objective's ratio and clip like any advantage
    loss    L += coef * agg((log pi - log pi_teacher)^2 / 2): the k2 estimator, whose gradient
            (log pi - log pi_teacher) grad log pi is that policy gradient, on-policy

Pure distillation: `+reward.weights.correct=0` leaves the teacher's signal alone.

The teacher: a finished RL run directory (its last policy, a LoRA run's adapters merged with
their base) or a local Hugging Face directory, of any size that fits beside the student; it
must share the student's tokenizer (it scores the student's ids). Held frozen in its compute
dtype on the student's mesh, sharded as the student's reference is."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import jax

from rlvr_jax.build import Policy, TaskSetup, reference_params
from rlvr_jax.train_step import Distill
from rlvr_jax.checkpoint import CheckpointError
from rlvr_jax.config import ConfigError, recorded_model_config
from rlvr_jax.export import policy_of_run
from rlvr_jax.models import hf
from rlvr_jax.models.policy import Decoder
from rlvr_jax.tokenizer import load_pretrained_tokenizer, load_tokenizer

KEY = "distill.teacher"


@dataclass(frozen=True)
class Teacher:
    model: Decoder
    params: object  # on the student's mesh, compute dtype, frozen
    describe: str  # what was loaded, for the console


def _fail(path: str, why: str) -> ConfigError:
    return ConfigError(f"config key '{KEY}': {path}: {why}")


def _from_run(path: str):
    with open(os.path.join(path, "run_config.json")) as f:
        recorded = json.load(f)
    if recorded.get("job", "rl") != "rl":
        raise _fail(path, f"a job={recorded.get('job')} run has no policy to distil from")
    if not os.path.exists(os.path.join(path, "summary.json")):
        raise _fail(path, "its training has not finished (no summary.json): rerun its command "
                    "to complete it")
    cfg = recorded_model_config(recorded["model"])
    tokenizer = (load_pretrained_tokenizer(cfg.path) if cfg.path
                 else load_tokenizer(os.path.join(path, "tokenizer")))
    try:
        params, step = policy_of_run(path, cfg)
    except CheckpointError as e:
        raise _fail(path, str(e)) from e
    return cfg, params, tokenizer, f"run {path} (step {step})"


def _from_hf(path: str):
    try:
        cfg, params = hf.load(path)
    except hf.HFImportError as e:
        raise _fail(path, str(e)) from e
    return cfg, params, load_pretrained_tokenizer(path), f"Hugging Face {path}"


def load(path: str, setup: TaskSetup, policy: Policy) -> Teacher:
    """The teacher at `path`, placed on the student's mesh. Bad input (neither a run nor a
    Hugging Face directory, unfinished, another tokenizer) is one ConfigError naming
    `distill.teacher`."""
    path = os.path.abspath(path)
    if os.path.exists(os.path.join(path, "run_config.json")):
        cfg, params, tokenizer, describe = _from_run(path)
    elif os.path.exists(os.path.join(path, "config.json")):
        cfg, params, tokenizer, describe = _from_hf(path)
    else:
        raise _fail(path, "neither a run directory (run_config.json) nor a Hugging Face "
                    "directory (config.json)")
    if tokenizer.get_vocab() != setup.tokenizer.get_vocab():
        raise _fail(path, "its tokenizer differs from the student's; the teacher scores the "
                    "student's tokens, so both need the same vocabulary")
    model = Decoder(cfg, cfg.vocab_size or len(tokenizer))
    params = reference_params(params, cfg.compute_dtype)
    params = jax.device_put(params, policy.shardings(params))
    size = sum(x.size for x in jax.tree.leaves(params))
    return Teacher(model, params, f"teacher {describe}: {cfg.num_layers} layers, hidden "
                   f"{cfg.hidden_size}, {size / 1e6:.2f}M params")


def options(teacher: Teacher, mode: str, coef: float) -> Distill:
    """The update step's distillation options for this teacher."""
    return Distill(teacher.model, str(mode), float(coef))
