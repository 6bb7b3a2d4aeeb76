"""Which of the sampler's decode steps take their products from our CPU kernel
(`rlvr_jax/ops/panel_matmul.py`), and the policy's params packed for it once per rollout.

`Weights` (policy.py) reads a projection's `panels` in place of its `kernel` when the params
have them, and `project` then takes the product through `panel_matmul`."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from rlvr_jax.config import ModelConfig
from rlvr_jax.ops import panel_matmul


# Decode batches up to this many rows take their products from `panel_matmul`. Measured per
# product shape on this 2-core CPU, against XLA's (YNNPACK's) products: 1.06-2.4x as fast at
# 16-256 rows (K 128-896, N 768-4864), 0.93-0.98x at 512 rows and 0.8x at 1024.
PANEL_MAX_ROWS = 256


def decode_panels(cfg: ModelConfig, batch: int) -> bool:
    """Whether the sampler's decode steps take their products from `panel_matmul` (weights
    packed once per rollout by `pack_decode_params`): on the CPU backend, float32 weights and
    compute, a batch of at most PANEL_MAX_ROWS rows, where the kernel builds (see
    rlvr_jax/ops/panel_matmul.py). Measured on the small benchmark model: README, sampler."""
    return (jax.default_backend() == "cpu" and jnp.dtype(cfg.param_dtype) == jnp.float32
            and jnp.dtype(cfg.compute_dtype) == jnp.float32 and batch <= PANEL_MAX_ROWS
            and panel_matmul.available())


def pack_decode_params(params: dict) -> dict:
    """`params` with every projection's `kernel` [D, F] (F a multiple of 16) replaced by
    `panels` [F/16, D, 16] for `panel_matmul` (`Weights` reads either); everything else
    (embedding, norms, biases, kernels of other widths) as is."""
    def pack(tree):
        out = {}
        for name, value in tree.items():
            if isinstance(value, Mapping):
                out[name] = pack(value)
            elif (name == "kernel" and value.ndim == 2
                  and value.shape[1] % panel_matmul.PANEL == 0):
                out["panels"] = panel_matmul.pack_panels(value)
            else:
                out[name] = value
        return out
    return pack(params)
