"""Test setup: 8 fake CPU devices for sharding tests, strict rank promotion, no hub lookups.
XLA_FLAGS must be set before JAX initialises its backend, so this runs at import time."""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
