"""Typed run configuration: dataclass schemas registered in Hydra's ConfigStore, split by
concern, each with its checks beside its fields.

Hydra composes `conf/` on top of these schemas in struct mode, so an unknown key (`algo.lr=1`),
a wrongly typed value or a name outside an enum (`algo.loss.agg=sum`) stops at composition with
an error naming the key. `validate` then runs each part's `check` (ranges, naming the key) and
the cross-part constraints. Everything below `RunConfig` is unpacked into plain arguments in one
place (`build.py`, `loop.py`): the maths never see a config object.

In Python, compose exactly what the command line composes with `rlvr_jax.compose`.
Parts: `choices.py` (errors, the enum-like names), `schemas.py` (the model, sampling and
algorithm dataclasses; each task's schema lives in its module: rlvr_jax/tasks/registry.py),
`run.py` (the run's other parts and `RunConfig`), `load.py` (Hydra registration, validation,
composition, the run's directory name).
"""

from rlvr_jax.config.choices import (AdvEstimator, Algorithm, Choice, ConfigError,
                                     CriticLayout, DataFormat, Dtype, KLEstimator, LoggerMode,
                                     LossAgg, LRSchedule, OnBadRow, Remat,
                                     RewardScheme, RewardSource, RopeScaling, SandboxMode,
                                     VerifierKind, choice)
from rlvr_jax.config.load import (as_dict, compose, conf_dir, recorded_model_config,
                                  register_configs, reward_components, run_dirname,
                                  to_run_config, validate, warmstart_key)
from rlvr_jax.config.run import (LEARNED_REWARD_KL_COEF, CheckpointConfig, DistributedConfig,
                                 DPOConfig, EnvConfig, EvalConfig, LoggerConfig, MeshConfig,
                                 PreferenceConfig, RewardConfig, RewardModelConfig, RolloutConfig,
                                 RunConfig,
                                 VerifierConfig, WarmupConfig)
from rlvr_jax.config.rollout import StreamConfig
from rlvr_jax.config.schemas import (AlgoConfig, DAPOConfig, ModelConfig, OptimConfig,
                                     PolicyLossConfig, PPOConfig, SamplingConfig)

__all__ = [
    "reward_components",
    "AdvEstimator",
    "AlgoConfig",
    "Algorithm",
    "CheckpointConfig",
    "Choice",
    "ConfigError",
    "CriticLayout",
    "DAPOConfig",
    "DataFormat",
    "Dtype",
    "EvalConfig",
    "KLEstimator",
    "LRSchedule",
    "LoggerConfig",
    "LoggerMode",
    "LossAgg",
    "EnvConfig",
    "MeshConfig",
    "DistributedConfig",
    "RewardModelConfig",
    "recorded_model_config",
    "RewardConfig",
    "PreferenceConfig",
    "DPOConfig",
    "LEARNED_REWARD_KL_COEF",
    "RewardSource",
    "ModelConfig",
    "OnBadRow",
    "OptimConfig",
    "PPOConfig",
    "PolicyLossConfig",
    "Remat",
    "RewardScheme",
    "RopeScaling",
    "RolloutConfig",
    "StreamConfig",
    "RunConfig",
    "SamplingConfig",
    "SandboxMode",
    "VerifierConfig",
    "VerifierKind",
    "WarmupConfig",
    "as_dict",
    "choice",
    "compose",
    "conf_dir",
    "register_configs",
    "run_dirname",
    "to_run_config",
    "validate",
    "warmstart_key",
]
