"""Config errors and the `Choice` enums: the fixed sets of names some keys take."""

from __future__ import annotations

import enum


class ConfigError(ValueError):
    """A config value is out of range or inconsistent; the message names the key."""


def _check(ok: bool, key: str, msg: str) -> None:
    if not ok:
        raise ConfigError(f"config key '{key}': {msg}")


class Choice(str, enum.Enum):
    """A config value from a fixed set of names. A str (compares, hashes and formats as its
    name), so the maths take it as the plain string; Hydra rejects any other name at
    composition, naming the key and the allowed names. Built with `choice` because some names
    ("token-mean") are not Python identifiers."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


def choice(name: str, *values: str) -> type[Choice]:
    return Choice(name, [(v, v) for v in values])  # type: ignore[return-value]


# Each set below is also defined where it is implemented; tests/test_config.py checks they agree.
Dtype = choice("Dtype", "float32", "bfloat16", "float16")
RopeScaling = choice("RopeScaling", "none", "linear", "llama3")
Algorithm = choice("Algorithm", "grpo", "ppo")  # group baselines | critic + GAE
AdvEstimator = choice("AdvEstimator", "grpo", "drgrpo", "rloo", "batch_std", "reinforce_pp",
                      "reinforce_pp_baseline", "maxrl", "gdpo",
                      "gae")  # advantages.ESTIMATORS + gae
LossAgg = choice("LossAgg", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                 "seq-mean-token-sum-norm")  # losses.AGGREGATIONS
KLEstimator = choice("KLEstimator", "k1", "k2", "k3")  # losses.kl_estimate
# losses.behaviour_weights: truncated (token, sequence) or masked (token_mask, sequence_mask,
# geo_mask) importance weights from the sampler to the proximal policy
ISCorrection = choice("ISCorrection", "none", "token", "sequence", "token_mask",
                      "sequence_mask", "geo_mask")
LRSchedule = choice("LRSchedule", "constant", "cosine")
CriticLayout = choice("CriticLayout", "separate", "head")
VerifierKind = choice("VerifierKind", "inprocess", "math", "code", "reasoning_gym",
                      "routed")  # verify/verifiers.make_verifier
SandboxMode = choice("SandboxMode", "forkserver", "fresh")
RewardScheme = choice("RewardScheme", "binary", "signed", "format_penalty", "code_penalty",
                      "graded")  # rewards.REWARD_TABLES
DataFormat = choice("DataFormat", "auto", "gsm8k", "math", "verl")
OnBadRow = choice("OnBadRow", "raise", "skip")
PairFormat = choice("PairFormat", "auto", "pairs", "chat", "hh")  # data/preferences.FORMATS
LoggerMode = choice("LoggerMode", "offline", "online", "disabled")
Remat = choice("Remat", "none", "full", "dots")  # models/policy.py: REMAT_POLICIES
Job = choice("Job", "rl", "reward_model", "dpo")  # loop.py | preference_runs.py
CallFormat = choice("CallFormat", "tag", "hermes")  # envs/calls.CALL_FORMATS
DistillMode = choice("DistillMode", "reward", "loss")  # train_step.Distill
RewardSource = choice("RewardSource", "verifier", "reward_model", "combined")  # learned_reward.py
