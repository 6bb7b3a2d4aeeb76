"""The typed schemas, one dataclass per concern, each with its checks beside its fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from rlvr_jax.config.choices import (AdvEstimator, Algorithm, CriticLayout, Dtype, ISCorrection,
                                     KLEstimator, LossAgg, LRSchedule, Remat,
                                     RopeScaling, _check)


# ------------------------------------------------------------------------------------ model
# The projections that can carry LoRA adapters (module names in models/policy.py).
LORA_TARGETS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")

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
    rope_scaling: RopeScaling = RopeScaling["none"]  # as HF config.json's rope_scaling
    rope_scaling_factor: float = 1.0
    rope_low_freq_factor: float = 1.0  # llama3 only
    rope_high_freq_factor: float = 4.0  # llama3 only
    rope_original_max_positions: int = 8192  # llama3 only
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = False  # Qwen2 uses a bias on q/k/v projections; Llama does not
    tie_embeddings: bool = True  # lm_head reuses the token embedding matrix
    init_std: float = 0.02  # normal init of every weight matrix
    param_dtype: Dtype = Dtype["float32"]
    compute_dtype: Dtype = Dtype["float32"]  # activations; logits and losses are always float32
    # Activation rematerialisation per block in the training forward: none (keep every
    # activation for the backward pass), full (keep each block's input only, recompute the
    # rest), dots (keep the matmul outputs, recompute the elementwise ops).
    remat: Remat = Remat["none"]
    # The head (lm_head + log-softmax) over this many response tokens at a time in the update,
    # recomputed in the backward pass: [B, chunk, V] float32 logits live at once instead of
    # [B, R, V]. 0: all response tokens at once.
    logits_chunk_tokens: int = 0
    # LoRA (Hu et al. 2021, arXiv:2106.09685): rank-r adapters beside the `lora_targets`
    # projections; only the adapters are trained and held in the optimizer, the base weights
    # stay frozen and, with the adapters off, are the KL reference. 0: full fine-tuning.
    lora_rank: int = 0
    lora_alpha: float = 16.0  # the adapters' product is scaled by lora_alpha / lora_rank
    lora_targets: List[str] = field(
        default_factory=lambda: ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"])

    @property
    def lora_scale(self) -> float:
        return self.lora_alpha / self.lora_rank if self.lora_rank else 0.0

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    def check(self, key: str = "model") -> None:
        _check(self.hidden_size > 0, f"{key}.hidden_size", "must be positive")
        _check(self.num_kv_heads > 0 and self.num_heads % self.num_kv_heads == 0,
               f"{key}.num_kv_heads", f"must divide {key}.num_heads={self.num_heads}")
        _check(self.head_dim is not None or self.hidden_size % self.num_heads == 0,
               f"{key}.head_dim", f"is unset and {key}.hidden_size is not a multiple of "
               f"{key}.num_heads")
        _check(self.resolved_head_dim % 2 == 0, f"{key}.head_dim",
               "must be even for rotary embeddings")
        _check(self.logits_chunk_tokens >= 0, f"{key}.logits_chunk_tokens", "must be >= 0")
        _check(self.lora_rank >= 0, f"{key}.lora_rank", "must be >= 0 (0: no adapters)")
        unknown = sorted(set(self.lora_targets) - set(LORA_TARGETS))
        _check(not unknown, f"{key}.lora_targets",
               f"unknown {unknown} (known: {', '.join(LORA_TARGETS)})")
        _check(self.lora_rank == 0 or bool(self.lora_targets), f"{key}.lora_targets",
               f"is empty while {key}.lora_rank={self.lora_rank}")
        _check(self.vocab_size == 0 or bool(self.path), f"{key}.path",
               f"model '{self.name}' is a pretrained architecture (vocab_size "
               f"{self.vocab_size}): set {key}.path to a local Hugging Face directory with its "
               "weights and tokenizer")


# ------------------------------------------------------------------------- sampling, algo
@dataclass
class SamplingConfig:
    """How rollouts are drawn during training. Evaluation uses its own greedy/T=1 settings."""

    temperature: float = 1.0  # > 0: rollouts are drawn from softmax(logits / temperature)
    top_k: int = 0  # 0 disables top-k
    top_p: float = 1.0  # 1.0 disables nucleus filtering
    max_new_tokens: int = 5  # response budget, EOS included
    # > 1: the one-turn decode loop in this many phases, each attending over the cache slots
    # it can have filled so far, not all prompt + response slots (sampling.make_sampler).
    decode_phases: int = 1

    def check(self, key: str = "sampling") -> None:
        _check(self.temperature > 0.0, f"{key}.temperature",
               "must be > 0: training recomputes the sampler's log-probs under softmax(logits /"
               " temperature), which greedy decoding does not have (evaluation reports greedy "
               "accuracy by itself)")
        _check(self.top_k >= 0, f"{key}.top_k", "must be >= 0 (0 disables)")
        _check(0.0 < self.top_p <= 1.0, f"{key}.top_p", "must be in (0, 1]")
        _check(self.max_new_tokens >= 1, f"{key}.max_new_tokens", "must be >= 1")
        _check(self.decode_phases >= 1, f"{key}.decode_phases", "must be >= 1")


@dataclass
class OptimConfig:
    """AdamW behind global-norm clipping (`algo.optim`)."""

    learning_rate: float = 2e-4
    lr_warmup_steps: int = 5  # RL steps of linear warm-up
    lr_schedule: LRSchedule = LRSchedule["constant"]  # cosine decays to 10% over num_steps
    adam_b1: float = 0.9
    adam_b2: float = 0.99
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0

    def check(self, key: str) -> None:
        _check(self.learning_rate > 0, f"{key}.learning_rate", "must be positive")
        _check(self.lr_warmup_steps >= 0, f"{key}.lr_warmup_steps", "must be >= 0")
        _check(self.max_grad_norm > 0, f"{key}.max_grad_norm", "must be positive")


@dataclass
class PolicyLossConfig:
    """The policy objective (`losses.policy_gradient_loss`): every knob the frameworks
    disagree on."""

    # The objective (rlvr_jax/objectives: clip, gspo, ...; entry points add others); the
    # knobs below are shared by those that declare them, `options` holds the rest.
    kind: str = "clip"
    clip_eps_low: float = 0.2  # ratio clipped to [1 - low, 1 + high]
    clip_eps_high: float = 0.28
    dual_clip_c: float = 0.0  # > 1 caps the loss of negative-advantage tokens at c * |A|; 0: off
    # beta of the KL penalty to the reference policy; 0 skips its forward. -1: 0 with the
    # verifier's reward, run.LEARNED_REWARD_KL_COEF with a reward model's (reward.source).
    kl_coef: float = -1.0
    kl_estimator: KLEstimator = KLEstimator["k3"]
    agg: LossAgg = LossAgg["token-mean"]
    entropy_coef: float = 0.0  # entropy bonus, aggregated like the policy loss
    # Off-policy correction (losses.behaviour_weights, decoupled PPO): none | token |
    # sequence truncated importance weights sampler -> proximal policy, capped at is_cap; or
    # token_mask | sequence_mask | geo_mask: tokens (whole sequences) whose weight (product,
    # geometric mean) is outside [is_mask_low, is_mask_high] leave the loss.
    correction: ISCorrection = ISCorrection["none"]
    is_cap: float = 2.0
    is_mask_low: float = 0.5
    is_mask_high: float = 2.0
    options: Dict[str, Any] = field(default_factory=dict)  # the objective's own knobs

    def objective_options(self, key: str = "algo.loss"):
        """The objective's options, checked (objectives.options_for)."""
        from rlvr_jax import objectives

        return objectives.options_for(self.kind, {
            "clip_eps_low": self.clip_eps_low, "clip_eps_high": self.clip_eps_high,
            "dual_clip_c": self.dual_clip_c}, dict(self.options), key)

    def check(self, key: str) -> None:
        from rlvr_jax import objectives

        _check(0 <= self.clip_eps_low < 1 and self.clip_eps_high >= 0, f"{key}.clip_eps_low",
               "need 0 <= clip_eps_low < 1 and clip_eps_high >= 0")
        _check(self.dual_clip_c == 0.0 or self.dual_clip_c > 1.0, f"{key}.dual_clip_c",
               "must be 0 (off) or > 1")
        spec = objectives.get(self.kind, f"{key}.kind")
        self.objective_options(key)
        _check(self.kl_coef >= 0 or self.kl_coef == -1, f"{key}.kl_coef",
               "must be >= 0, or -1 (by the reward source)")
        _check(self.entropy_coef >= 0, f"{key}.entropy_coef", "must be >= 0")
        _check(self.is_cap >= 1.0, f"{key}.is_cap", "must be >= 1")
        _check(0.0 < self.is_mask_low <= 1.0 <= self.is_mask_high, f"{key}.is_mask_low",
               "need 0 < is_mask_low <= 1 <= is_mask_high")
        _check(self.correction == "none" or spec.decoupled, f"{key}.correction",
               f"objective {self.kind} takes no per-token importance weights (the decoupled "
               "correction is for token-level objectives, e.g. kind=clip)")


@dataclass
class PPOConfig:
    """PPO's critic and GAE (`algo.ppo`, used with `algo.name=ppo`)."""

    critic: CriticLayout = CriticLayout["separate"]  # own trunk (from the warm policy) | head
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

    def check(self, key: str) -> None:
        _check(self.critic_learning_rate > 0, f"{key}.critic_learning_rate", "must be positive")
        _check(self.critic_warmup_steps >= 0, f"{key}.critic_warmup_steps", "must be >= 0")
        _check(0.0 <= self.gae_gamma <= 1.0 and 0.0 <= self.gae_lambda <= 1.0,
               f"{key}.gae_gamma", "gae_gamma and gae_lambda must be in [0, 1]")
        _check(self.value_clip >= 0 and self.vf_coef >= 0, f"{key}.value_clip",
               "value_clip, vf_coef >= 0")
        _check(self.kl_horizon >= 1, f"{key}.kl_horizon", "must be >= 1")


@dataclass
class GiGPOConfig:
    """Step-level groups for multi-turn episodes (GiGPO, rlvr_jax/step_groups.py): turns
    that start from one state in several episodes of a group get a relative advantage of
    their own, `weight` x it added to the episode's."""

    weight: float = 0.0  # omega; 0: off
    gamma: float = 0.95  # the discount of a turn's return over the turns after it
    scale_by_std: bool = True

    def check(self, key: str) -> None:
        _check(self.weight >= 0, f"{key}.weight", "must be >= 0 (0: off)")
        _check(0 < self.gamma <= 1, f"{key}.gamma", "must be in (0, 1]")


@dataclass
class PackConfig:
    """The update packed without padding (rlvr_jax/packing.py): each minibatch's rows go into
    rows of `row_tokens` slots (each unit's prompt once, responses one after another), the
    gradient accumulated over microbatches of `microbatch_rows` packed rows, the empty ones
    skipped. The same gradient as the padded update to float32 rounding."""

    row_tokens: int = 0  # slots per packed row, at least the prompt + response budget; 0: off
    microbatch_rows: int = 8  # packed rows per microbatch: its token budget is this x row_tokens

    def check(self, key: str) -> None:
        _check(self.row_tokens >= 0, f"{key}.row_tokens", "must be >= 0 (0: off)")
        _check(self.microbatch_rows >= 1, f"{key}.microbatch_rows", "must be >= 1")


@dataclass
class DAPOConfig:
    """DAPO's sampling and shaping (Yu et al. 2025, arXiv:2503.14476), `algo.dapo`."""

    overlong_buffer_tokens: int = 0  # soft length penalty over the last L_cache tokens; 0: off
    overlong_penalty_factor: float = 1.0
    mask_truncated: bool = False  # responses cut at the budget (no EOS) leave the loss
    dynamic_sampling: bool = False  # keep only groups with unequal rewards (static shapes)
    sampled_prompts_per_step: int = 0  # prompts sampled per step; 0: = algo.prompts_per_step

    def check(self, key: str, prompts_per_step: int, max_new_tokens: int) -> None:
        _check(0 <= self.overlong_buffer_tokens < max_new_tokens,
               f"{key}.overlong_buffer_tokens",
               f"must be in [0, sampling.max_new_tokens={max_new_tokens})")
        _check(self.sampled_prompts_per_step == 0
               or self.sampled_prompts_per_step >= prompts_per_step,
               f"{key}.sampled_prompts_per_step", "must be 0 or >= algo.prompts_per_step")
        _check(self.dynamic_sampling
               or self.sampled_prompts_per_step in (0, prompts_per_step),
               f"{key}.sampled_prompts_per_step",
               f"over-sampling needs {key}.dynamic_sampling=true")

    def sampled_prompts(self, prompts_per_step: int) -> int:
        """Prompts sampled per step (more than updated with dynamic sampling)."""
        return self.sampled_prompts_per_step or prompts_per_step


@dataclass
class AlgoConfig:
    """GRPO (Shao et al. 2024, arXiv:2402.03300) and its family, or PPO with a critic
    (`name: ppo`, `adv_estimator: gae`). conf/README.md says what each preset sets."""

    name: Algorithm = Algorithm["grpo"]
    prompts_per_step: int = 64  # prompts in each update batch
    samples_per_prompt: int = 8  # G: the group size
    adv_estimator: AdvEstimator = AdvEstimator["grpo"]
    adv_eps: float = 1e-6  # added to the std before dividing
    # Several updates per rollout: mu epochs, each over a fresh split into minibatches; each
    # minibatch gradient accumulated over microbatches (same result as one big batch).
    epochs_per_rollout: int = 1
    minibatches_per_epoch: int = 1
    microbatches: int = 1
    # The update computes each group's prompt once (its keys and values shared by the G
    # responses; Decoder.response_hidden): the prompt's FLOPs fall by G, results equal to
    # float32 rounding. Minibatches and microbatches are then cut on group boundaries.
    share_prompts: bool = False
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    dapo: DAPOConfig = field(default_factory=DAPOConfig)
    gigpo: GiGPOConfig = field(default_factory=GiGPOConfig)
    pack: PackConfig = field(default_factory=PackConfig)

    def check(self, max_new_tokens: int, key: str = "algo") -> None:
        _check(self.prompts_per_step >= 1, f"{key}.prompts_per_step", "must be >= 1")
        _check(self.samples_per_prompt >= 2 or self.name == "ppo", f"{key}.samples_per_prompt",
               "must be >= 2: group-relative advantages need a group")
        _check((self.name == "ppo") == (self.adv_estimator == "gae"), f"{key}.adv_estimator",
               "gae goes with algo.name=ppo (it needs the critic), and ppo with gae")
        _check(self.adv_eps > 0, f"{key}.adv_eps", "must be positive")
        _check(min(self.epochs_per_rollout, self.minibatches_per_epoch, self.microbatches) >= 1,
               f"{key}.epochs_per_rollout", "epochs, minibatches and microbatches must be >= 1")
        rows = self.prompts_per_step * self.samples_per_prompt
        _check(rows % (self.minibatches_per_epoch * self.microbatches) == 0,
               f"{key}.minibatches_per_epoch",
               f"prompts_per_step x samples_per_prompt = {rows} must be divisible by "
               "minibatches_per_epoch x microbatches")
        if self.share_prompts:
            _check(self.samples_per_prompt >= 2, f"{key}.share_prompts",
                   "needs algo.samples_per_prompt >= 2 (a group to share its prompt with)")
            _check(self.prompts_per_step % (self.minibatches_per_epoch * self.microbatches)
                   == 0, f"{key}.share_prompts",
                   f"minibatches and microbatches keep groups whole: algo.prompts_per_step="
                   f"{self.prompts_per_step} must be divisible by minibatches_per_epoch x "
                   f"microbatches = {self.minibatches_per_epoch * self.microbatches}")
        self.optim.check(f"{key}.optim")
        self.loss.check(f"{key}.loss")
        self.ppo.check(f"{key}.ppo")
        self.dapo.check(f"{key}.dapo", self.prompts_per_step, max_new_tokens)
        self.gigpo.check(f"{key}.gigpo")
        self.pack.check(f"{key}.pack")
        _check(not self.pack.row_tokens or self.microbatches == 1, f"{key}.microbatches",
               "packing (algo.pack.row_tokens) cuts its own microbatches, of "
               "algo.pack.microbatch_rows packed rows each: leave algo.microbatches at 1")
        _check(self.gigpo.weight == 0 or self.name != "ppo", f"{key}.gigpo.weight",
               "step-level groups add to a group estimator's advantages; PPO's GAE gives each "
               "token its own credit already")
        p = self.ppo
        _check(not p.kl_in_reward or self.name == "ppo", f"{key}.ppo.kl_in_reward",
               "a per-token KL reward needs GAE (algo.name=ppo); use algo.loss.kl_coef for the "
               "loss term")
        _check(p.kl_target == 0.0 or (p.kl_target > 0 and p.kl_in_reward
                                      and self.loss.kl_coef > 0),
               f"{key}.ppo.kl_target",
               "the adaptive controller needs algo.ppo.kl_in_reward=true and algo.loss.kl_coef > 0")
