"""Typed run configuration: dataclass schemas registered in Hydra's ConfigStore, plus validation.

Hydra composes `conf/` on top of these schemas in struct mode, so an unknown key (`algo.lr=1`)
or a wrongly typed value stops at compose time with an error naming the key. `validate` then
checks the ranges and cross-field constraints that types cannot express, again naming the key.
Everything below `RunConfig` is unpacked into plain arguments in `loop.py`: the maths never see
a config object.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf


@dataclass
class ModelConfig:
    """A decoder-only LM of the Llama/Qwen2 family (RMSNorm, RoPE, GQA, SwiGLU)."""

    name: str = "tiny"
    # A local Hugging Face directory (config.json + safetensors + tokenizer) of the Qwen2 or
    # Llama family. When set, the architecture below is read from its config.json and the
    # weights and tokenizer from the directory; the warm start is skipped. "": train from init.
    path: str = ""
    vocab_size: int = 0  # 0: the tokenizer's length (HF models: config.json's vocab_size)
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2  # grouped-query attention: num_heads must be a multiple of this
    head_dim: Optional[int] = None  # None: hidden_size // num_heads
    intermediate_size: int = 384  # SwiGLU inner width
    rope_theta: float = 10000.0
    rope_scaling: str = "none"  # none | linear | llama3 (as HF config.json's rope_scaling)
    rope_scaling_factor: float = 1.0
    rope_low_freq_factor: float = 1.0  # llama3 only
    rope_high_freq_factor: float = 4.0  # llama3 only
    rope_original_max_positions: int = 8192  # llama3 only
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = False  # Qwen2 uses a bias on q/k/v projections; Llama does not
    tie_embeddings: bool = True  # lm_head reuses the token embedding matrix
    init_std: float = 0.02  # normal init of every weight matrix
    param_dtype: str = "float32"
    compute_dtype: str = "float32"  # activations; logits and losses are always float32

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads


@dataclass
class TaskConfig:
    """`arithmetic`: procedural `a op b op c ...`, evaluated with the usual precedence.
    `dataset`: prompts from local JSONL/Parquet files (GSM8K, MATH or verl rows; see
    rlvr_jax/data/loaders.py), math answers checked by the `math` verifier."""

    name: str = "arithmetic"
    # dataset only
    train_path: str = ""
    test_path: str = ""
    format: str = "auto"  # auto | gsm8k | math | verl
    on_bad_row: str = "raise"  # raise (error naming file:line) | skip (counted and reported)
    instruction: str = 'Let\'s think step by step and output the final answer after "####".'
    max_prompt_tokens: int = 512  # longer prompts are bad rows
    # arithmetic only
    operators: List[str] = field(default_factory=lambda: ["+"])
    operand_digits: int = 2  # operands are uniform in [0, 10**operand_digits)
    min_operands: int = 2
    max_operands: int = 2  # > 2 gives multi-step expressions
    heldout_fraction: float = 0.1  # share of all expressions reserved for evaluation
    split_seed: int = 0  # salts the hash that assigns an expression to train or held-out
    prompt_template: str = "{question}="
    zero_pad_operands: bool = True  # "07+88": digits at fixed positions, learned much faster


@dataclass
class SamplingConfig:
    """How rollouts are drawn during training. Evaluation uses its own greedy/T=1 settings."""

    temperature: float = 1.0  # > 0: rollouts are drawn from softmax(logits / temperature)
    top_k: int = 0  # 0 disables top-k
    top_p: float = 1.0  # 1.0 disables nucleus filtering
    max_new_tokens: int = 5  # response budget, EOS included


@dataclass
class AlgoConfig:
    """GRPO (Shao et al. 2024, arXiv:2402.03300) and its family, or PPO with a critic
    (`name: ppo`, `adv_estimator: gae`). Every knob the frameworks disagree on is named here;
    the README's algorithm table says what each preset sets."""

    name: str = "grpo"  # grpo (group baselines, no critic) | ppo (critic + GAE)
    prompts_per_step: int = 64
    samples_per_prompt: int = 8
    learning_rate: float = 2e-4
    lr_warmup_steps: int = 5
    lr_schedule: str = "constant"  # constant | cosine (cosine decays to 10% over num_steps)
    adam_b1: float = 0.9
    adam_b2: float = 0.99
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    clip_eps_low: float = 0.2  # ratio clipped to [1 - low, 1 + high]
    clip_eps_high: float = 0.28
    kl_coef: float = 0.0  # beta of the KL penalty to the reference policy; 0 skips its forward
    kl_estimator: str = "k3"  # k1 | k2 | k3 (see losses.kl_estimate)
    adv_estimator: str = "grpo"  # grpo | drgrpo | rloo | batch_std | reinforce_pp | reinforce_pp_baseline
    adv_eps: float = 1e-6  # added to the std before dividing
    loss_agg: str = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm
    policy_loss: str = "clip"  # clip (token ratios) | gspo (one ratio per sequence)
    dual_clip_c: float = 0.0  # > 1 caps the loss of negative-advantage tokens at c * |A|; 0: off
    entropy_coef: float = 0.0  # entropy bonus, aggregated like the policy loss
    # Several updates per rollout: mu epochs, each over a fresh split into minibatches; each
    # minibatch gradient accumulated over microbatches (same result as one big batch).
    epochs_per_rollout: int = 1
    minibatches_per_epoch: int = 1
    microbatches: int = 1
    # PPO (name: ppo)
    critic: str = "separate"  # separate (own trunk, copied from the warm policy) | head (shared)
    critic_learning_rate: float = 1e-4
    critic_warmup_steps: int = 0  # first RL steps update only the critic
    vf_coef: float = 1.0  # weight of the value loss (matters for critic=head)
    value_clip: float = 0.2  # 0: unclipped value loss
    gae_gamma: float = 1.0
    gae_lambda: float = 0.95
    whiten_advantages: bool = True
    kl_in_reward: bool = False  # PPO-RLHF style per-token KL penalty in the reward, not the loss
    kl_target: float = 0.0  # > 0: adaptive KL controller (with kl_in_reward) toward this KL/seq
    kl_horizon: int = 10000
    # DAPO (arXiv:2503.14476)
    overlong_buffer_tokens: int = 0  # soft length penalty over the last L_cache tokens; 0: off
    overlong_penalty_factor: float = 1.0
    mask_truncated: bool = False  # responses cut at the budget (no EOS) leave the loss
    dynamic_sampling: bool = False  # keep only groups with unequal rewards (static shapes)
    sampled_prompts_per_step: int = 0  # prompts sampled per step; 0: = prompts_per_step


@dataclass
class WarmupConfig:
    """Supervised warm start on generated demonstrations, a fraction of them deliberately wrong."""

    steps: int = 1000
    sequences_per_step: int = 128
    learning_rate: float = 2e-3
    lr_warmup_steps: int = 50
    wrong_fraction: float = 0.3  # share of demonstrations whose answer is off by 1..max_offset
    wrong_max_offset: int = 10
    weight_decay: float = 0.01
    # Reuse warm starts across runs: params go to <shared_dir>/<hash of everything that shapes
    # them (seed, model, task, warmup, response budget)>, so a sweep over RL knobs trains each
    # seed's warm start once. "": keep it in the run directory.
    shared_dir: str = ""


@dataclass
class VerifierConfig:
    # inprocess: the arithmetic task's exact-integer check in the trainer process (trusted).
    # math: math-verify equivalence in worker processes with hard deadlines (rlvr_jax/verify).
    # code: candidate programs run in the bubblewrap sandbox (rlvr_jax/verify/sandbox.py).
    kind: str = "inprocess"
    reward_scheme: str = "binary"  # a key of rlvr_jax.rewards.REWARD_TABLES
    mode: str = "forkserver"  # sandboxed kinds: forkserver | fresh (same containment)
    # > 1: sample the batch in this many chunks and verify chunk k (worker processes) while
    # chunk k+1 is sampled; all chunks use the same params, so it stays on-policy.
    overlap_chunks: int = 1
    workers: int = 2
    timeout_s: float = 10.0  # per job; the worker is killed and replaced past it
    batch_timeout_s: float = 300.0  # per call


@dataclass
class MeshConfig:
    """Device mesh; axis names live in rlvr_jax/sharding.py. -1 means 'all remaining devices'."""

    data: int = -1
    fsdp: int = 1


@dataclass
class LoggerConfig:
    mode: str = "offline"  # W&B mode: offline | online | disabled
    project: str = "rlvr_jax"
    entity: Optional[str] = None
    progress_bar: bool = True


@dataclass
class CheckpointConfig:
    every_steps: int = 20
    max_to_keep: int = 2


@dataclass
class EvalConfig:
    num_problems: int = 500  # held-out problems
    sampled_per_problem: int = 2  # temperature-1 samples per problem for sampled accuracy
    sequences_per_batch: int = 512  # fixed eval batch shape (last batch padded)
    every_steps: int = 0  # 0: only after the warm start and at the end


@dataclass
class RunConfig:
    name: str = "default"
    seed: int = 0
    num_steps: int = 60  # RL steps
    run_dir: str = "."  # set by hydra to its run directory
    # Exit cleanly (after a checkpoint) once this invocation has done this many RL steps;
    # rerunning resumes. For schedulers with time slots. 0: no limit.
    stop_after_steps: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    mesh: MeshConfig = field(default_factory=MeshConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def warmstart_key(cfg: "RunConfig") -> str:
    """A stable name for the warm start `cfg` would train (see WarmupConfig.shared_dir)."""
    import json

    w = dataclasses.asdict(cfg.warmup)
    w.pop("shared_dir")
    key = {"seed": cfg.seed, "model": dataclasses.asdict(cfg.model), "warmup": w,
           "task": dataclasses.asdict(cfg.task), "max_new_tokens": cfg.sampling.max_new_tokens}
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def run_dirname(overrides: str, max_chars: int = 120) -> str:
    """A directory name for a list of overrides: deterministic (the same command resumes the same
    run), a single path component, and short enough for any filesystem (255 bytes)."""
    name = overrides.replace("/", "_").replace(os.sep, "_")
    if len(name) > max_chars:
        digest = hashlib.sha1(overrides.encode()).hexdigest()[:10]
        name = f"{name[: max_chars - 11]}~{digest}"
    return name


def register_configs() -> None:
    """Register the schemas so `conf/config.yaml` composes on top of them (struct mode), and the
    `run_dirname` resolver used by hydra.run.dir / hydra.sweep.subdir."""
    if not OmegaConf.has_resolver("run_dirname"):
        OmegaConf.register_new_resolver("run_dirname", run_dirname)
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for group, node in [("model", ModelConfig), ("task", TaskConfig), ("sampling", SamplingConfig),
                        ("algo", AlgoConfig), ("verifier", VerifierConfig), ("mesh", MeshConfig),
                        ("logger", LoggerConfig)]:
        cs.store(group=group, name=f"{group}_schema", node=node)


class ConfigError(ValueError):
    """A config value is out of range or inconsistent; the message names the key."""


def _check(ok: bool, key: str, msg: str) -> None:
    if not ok:
        raise ConfigError(f"config key '{key}': {msg}")


def validate(cfg: RunConfig) -> RunConfig:
    m, t, s, a, w, e = cfg.model, cfg.task, cfg.sampling, cfg.algo, cfg.warmup, cfg.eval
    _check(m.hidden_size > 0, "model.hidden_size", "must be positive")
    _check(m.num_kv_heads > 0 and m.num_heads % m.num_kv_heads == 0, "model.num_kv_heads",
           f"must divide model.num_heads={m.num_heads}")
    _check(m.head_dim is not None or m.hidden_size % m.num_heads == 0, "model.head_dim",
           "is unset and model.hidden_size is not a multiple of model.num_heads")
    _check(m.resolved_head_dim % 2 == 0, "model.head_dim", "must be even for rotary embeddings")
    _check(m.rope_scaling in ("none", "linear", "llama3"), "model.rope_scaling",
           "must be none, linear or llama3")
    _check(m.vocab_size == 0 or bool(m.path), "model.path",
           f"model '{m.name}' is a pretrained architecture (vocab_size {m.vocab_size}): set "
           "model.path to a local Hugging Face directory with its weights and tokenizer")
    for key in ("param_dtype", "compute_dtype"):
        _check(getattr(m, key) in ("float32", "bfloat16", "float16"), f"model.{key}",
               "must be float32, bfloat16 or float16")
    _check(t.name in ("arithmetic", "dataset", "codegen"), "task.name",
           f"unknown task '{t.name}' (known: arithmetic, dataset, codegen)")
    _check(t.name != "codegen" or cfg.verifier.kind == "code", "verifier.kind",
           "task=codegen needs verifier=code (its programs run in the sandbox)")
    _check(cfg.verifier.mode in ("forkserver", "fresh"), "verifier.mode",
           "must be forkserver or fresh")
    _check(cfg.verifier.overlap_chunks >= 1 and (cfg.algo.sampled_prompts_per_step
                                                 or cfg.algo.prompts_per_step)
           % cfg.verifier.overlap_chunks == 0, "verifier.overlap_chunks",
           "must be >= 1 and divide the sampled prompts per step")
    if t.name == "dataset":
        _check(bool(t.train_path) and bool(t.test_path), "task.train_path",
               "task=dataset needs task.train_path and task.test_path")
        _check(t.format in ("auto", "gsm8k", "math", "verl"), "task.format",
               "must be auto, gsm8k, math or verl")
        _check(t.on_bad_row in ("raise", "skip"), "task.on_bad_row", "must be raise or skip")
        _check(cfg.verifier.kind == "math", "verifier.kind", "task=dataset needs verifier=math")
        _check(bool(m.path) or w.steps == 0, "model.path",
               "task=dataset has no demonstrations for a warm start: set model.path to a "
               "Hugging Face directory (or warmup.steps=0)")
    _check(len(t.operators) > 0 and set(t.operators) <= {"+", "-", "*"}, "task.operators",
           f"must be a non-empty subset of ['+', '-', '*'], got {list(t.operators)}")
    _check(1 <= t.operand_digits <= 6, "task.operand_digits", "must be in [1, 6]")
    _check(2 <= t.min_operands <= t.max_operands, "task.min_operands",
           "must be >= 2 and <= task.max_operands")
    _check(0.0 < t.heldout_fraction < 1.0, "task.heldout_fraction", "must be in (0, 1)")
    _check("{question}" in t.prompt_template, "task.prompt_template", "must contain '{question}'")
    _check(s.temperature > 0.0, "sampling.temperature",
           "must be > 0: training recomputes the sampler's log-probs under softmax(logits / "
           "temperature), which greedy decoding does not have (evaluation reports greedy "
           "accuracy by itself)")
    _check(s.top_k >= 0, "sampling.top_k", "must be >= 0 (0 disables)")
    _check(0.0 < s.top_p <= 1.0, "sampling.top_p", "must be in (0, 1]")
    _check(s.max_new_tokens >= 1, "sampling.max_new_tokens", "must be >= 1")
    _check(a.name in ("grpo", "ppo"), "algo.name", f"unknown algorithm '{a.name}' (known: grpo, ppo)")
    _check(a.prompts_per_step >= 1, "algo.prompts_per_step", "must be >= 1")
    _check(a.samples_per_prompt >= 2 or a.name == "ppo", "algo.samples_per_prompt",
           "must be >= 2: group-relative advantages need a group")
    _check((a.name == "ppo") == (a.adv_estimator == "gae"), "algo.adv_estimator",
           "gae goes with algo.name=ppo (it needs the critic), and ppo with gae")
    _check(a.critic in ("separate", "head"), "algo.critic", "must be separate or head")
    _check(a.critic_learning_rate > 0, "algo.critic_learning_rate", "must be positive")
    _check(a.critic_warmup_steps >= 0, "algo.critic_warmup_steps", "must be >= 0")
    _check(0.0 <= a.gae_gamma <= 1.0 and 0.0 <= a.gae_lambda <= 1.0, "algo.gae_gamma",
           "gae_gamma and gae_lambda must be in [0, 1]")
    _check(a.value_clip >= 0 and a.vf_coef >= 0, "algo.value_clip", "value_clip, vf_coef >= 0")
    _check(not a.kl_in_reward or a.name == "ppo", "algo.kl_in_reward",
           "a per-token KL reward needs GAE (algo.name=ppo); use kl_coef for the loss term")
    _check(a.kl_target == 0.0 or (a.kl_target > 0 and a.kl_in_reward and a.kl_coef > 0),
           "algo.kl_target", "the adaptive controller needs kl_in_reward=true and kl_coef > 0")
    _check(a.kl_horizon >= 1, "algo.kl_horizon", "must be >= 1")
    _check(a.entropy_coef >= 0, "algo.entropy_coef", "must be >= 0")
    _check(min(a.epochs_per_rollout, a.minibatches_per_epoch, a.microbatches) >= 1,
           "algo.epochs_per_rollout", "epochs, minibatches and microbatches must be >= 1")
    _check((a.prompts_per_step * a.samples_per_prompt)
           % (a.minibatches_per_epoch * a.microbatches) == 0, "algo.minibatches_per_epoch",
           f"prompts_per_step x samples_per_prompt = {a.prompts_per_step * a.samples_per_prompt}"
           " must be divisible by minibatches_per_epoch x microbatches")
    _check(0 <= a.overlong_buffer_tokens < s.max_new_tokens, "algo.overlong_buffer_tokens",
           f"must be in [0, sampling.max_new_tokens={s.max_new_tokens})")
    _check(a.sampled_prompts_per_step == 0 or a.sampled_prompts_per_step >= a.prompts_per_step,
           "algo.sampled_prompts_per_step", "must be 0 or >= algo.prompts_per_step")
    _check(a.dynamic_sampling or a.sampled_prompts_per_step in (0, a.prompts_per_step),
           "algo.sampled_prompts_per_step", "over-sampling needs algo.dynamic_sampling=true")
    _check(a.learning_rate > 0, "algo.learning_rate", "must be positive")
    _check(a.lr_schedule in ("constant", "cosine"), "algo.lr_schedule", "must be constant or cosine")
    _check(0 <= a.clip_eps_low < 1 and a.clip_eps_high >= 0, "algo.clip_eps_low",
           "need 0 <= clip_eps_low < 1 and clip_eps_high >= 0")
    _check(a.kl_coef >= 0, "algo.kl_coef", "must be >= 0")
    _check(a.adv_eps > 0, "algo.adv_eps", "must be positive")
    from rlvr_jax.advantages import ESTIMATORS  # local: keep config import-light
    from rlvr_jax.losses import AGGREGATIONS

    _check(a.adv_estimator in ESTIMATORS + ("gae",), "algo.adv_estimator",
           f"must be one of {ESTIMATORS + ('gae',)}")
    _check(a.loss_agg in AGGREGATIONS, "algo.loss_agg", f"must be one of {AGGREGATIONS}")
    _check(a.kl_estimator in ("k1", "k2", "k3"), "algo.kl_estimator", "must be k1, k2 or k3")
    _check(a.policy_loss in ("clip", "gspo"), "algo.policy_loss", "must be clip or gspo")
    _check(a.dual_clip_c == 0.0 or a.dual_clip_c > 1.0, "algo.dual_clip_c",
           "must be 0 (off) or > 1")
    _check(w.steps >= 0, "warmup.steps", "must be >= 0")
    _check(0.0 <= w.wrong_fraction < 1.0, "warmup.wrong_fraction", "must be in [0, 1)")
    _check(w.wrong_max_offset >= 1, "warmup.wrong_max_offset", "must be >= 1")
    _check(cfg.verifier.kind in ("inprocess", "math", "code"), "verifier.kind",
           f"unknown verifier '{cfg.verifier.kind}' (known: inprocess, math, code)")
    _check(cfg.verifier.kind != "inprocess" or t.name == "arithmetic", "verifier.kind",
           "inprocess checks only the arithmetic task")
    _check(cfg.verifier.workers >= 1 and cfg.verifier.timeout_s > 0, "verifier.workers",
           "verifier.workers >= 1 and verifier.timeout_s > 0")
    _check(cfg.logger.mode in ("offline", "online", "disabled"), "logger.mode",
           "must be offline, online or disabled")
    _check(cfg.checkpoint.every_steps >= 1, "checkpoint.every_steps", "must be >= 1")
    _check(e.num_problems >= 1 and e.sampled_per_problem >= 1, "eval.num_problems",
           "eval.num_problems and eval.sampled_per_problem must be >= 1")
    _check(cfg.num_steps >= 0, "num_steps", "must be >= 0")
    _check(cfg.stop_after_steps >= 0, "stop_after_steps", "must be >= 0 (0: no limit)")
    _check(cfg.mesh.data == -1 or cfg.mesh.data >= 1, "mesh.data", "must be -1 or >= 1")
    _check(cfg.mesh.fsdp == -1 or cfg.mesh.fsdp >= 1, "mesh.fsdp", "must be -1 or >= 1")
    from rlvr_jax.rewards import REWARD_TABLES  # local: rewards imports types, not config

    _check(cfg.verifier.reward_scheme in REWARD_TABLES, "verifier.reward_scheme",
           f"unknown scheme (known: {sorted(REWARD_TABLES)})")
    return cfg


def _unknown_keys(node: Any, schema: type, prefix: str = "") -> list[str]:
    """Keys present in `node` that the dataclass `schema` does not declare (recursively).

    Needed because Hydra's `+key=value` appends past struct mode, and OmegaConf.to_object then
    drops the stray key silently: a typo would be ignored instead of reported."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    out = []
    for key in node.keys():
        if key not in fields:
            out.append(prefix + str(key))
            continue
        sub_type = fields[key].type
        sub_type = globals().get(sub_type, sub_type) if isinstance(sub_type, str) else sub_type
        if dataclasses.is_dataclass(sub_type) and isinstance(node[key], (DictConfig, dict)):
            out += _unknown_keys(node[key], sub_type, f"{prefix}{key}.")
    return out


def to_run_config(cfg: DictConfig | RunConfig | dict[str, Any]) -> RunConfig:
    """Hydra's DictConfig -> validated dataclass instance (OmegaConf checks types on the way)."""
    if isinstance(cfg, RunConfig):
        return validate(cfg)
    unknown = _unknown_keys(cfg, RunConfig)
    if unknown:
        raise ConfigError(f"unknown config key(s): {', '.join(unknown)}")
    merged = OmegaConf.merge(OmegaConf.structured(RunConfig), cfg)
    obj = OmegaConf.to_object(merged)
    assert isinstance(obj, RunConfig)
    return validate(obj)


def as_dict(cfg: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


__all__ = ["RunConfig", "ModelConfig", "TaskConfig", "SamplingConfig", "AlgoConfig", "WarmupConfig",
           "VerifierConfig", "MeshConfig", "LoggerConfig", "CheckpointConfig", "EvalConfig",
           "ConfigError", "register_configs", "validate", "to_run_config", "as_dict", "MISSING"]
