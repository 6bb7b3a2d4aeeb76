"""Rotary position embeddings (Su et al. 2021, arXiv:2104.09864) in the "rotate half" layout
that HF Llama/Qwen2 use, with the frequency scalings HF configs name, and the position ids of
left-padded rows. Shape letters: the legend in rlvr_jax/types.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax.config import ModelConfig


def positions_from_mask(input_mask_B_T: jax.Array) -> jax.Array:
    """Position ids that start at 0 on the first real token (left padding gets position 0)."""
    count_B_T = jnp.cumsum(input_mask_B_T.astype(jnp.int32), axis=-1)
    return jnp.maximum(count_B_T - 1, 0)


def rope_inv_freq(head_dim: int, theta: float, scaling: str = "none", factor: float = 1.0,
                  low_freq_factor: float = 1.0, high_freq_factor: float = 4.0,
                  original_max_positions: int = 8192) -> np.ndarray:
    """Rotary frequencies theta^(-2i/D), i < D/2 (float64 numpy), with the scalings HF
    configs name in `rope_scaling` / `rope_parameters`:

      none / default  unscaled
      linear          position interpolation (Chen et al. 2023, arXiv:2306.15595): / factor
      llama3          Llama 3.1's band-wise scaling: wavelengths above
                      original_max_positions / low_freq_factor are divided by `factor`, those
                      below original_max_positions / high_freq_factor kept, the band between
                      interpolated smoothly
    """
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    if scaling in ("none", "default"):
        return inv
    if scaling == "linear":
        return inv / factor
    if scaling == "llama3":
        wavelen = 2 * np.pi / inv
        low_wavelen = original_max_positions / low_freq_factor
        high_wavelen = original_max_positions / high_freq_factor
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = ((original_max_positions / wavelen - low_freq_factor)
                  / (high_freq_factor - low_freq_factor))
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(medium, smoothed, scaled)
    raise ValueError(f"unsupported rope scaling {scaling!r} (supported: none, linear, llama3)")


def rope_tables(positions_B_T: jax.Array, inv_freq: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """(cos, sin) of the angles pos * inv_freq[i], each [B, T, D/2] float32, shared by every
    layer of a forward."""
    inv_freq = jnp.asarray(np.asarray(inv_freq, np.float32))
    angles_B_T_D2 = positions_B_T.astype(jnp.float32)[..., None] * inv_freq[None, None, :]
    return jnp.cos(angles_B_T_D2), jnp.sin(angles_B_T_D2)


def rope_for(cfg: ModelConfig, positions_B_T: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The model's rotary (cos, sin) tables at these positions; see `rope_tables`."""
    inv_freq = rope_inv_freq(cfg.resolved_head_dim, cfg.rope_theta, cfg.rope_scaling,
                             cfg.rope_scaling_factor, cfg.rope_low_freq_factor,
                             cfg.rope_high_freq_factor, cfg.rope_original_max_positions)
    return rope_tables(positions_B_T, inv_freq)


def apply_rope(x_B_T_H_D: jax.Array, cos_B_T_D2: jax.Array, sin_B_T_D2: jax.Array) -> jax.Array:
    """Rotate pairs (i, i + D/2) by the tabulated angles, in float32."""
    d = x_B_T_H_D.shape[-1]
    cos, sin = cos_B_T_D2[:, :, None, :], sin_B_T_D2[:, :, None, :]
    x = x_B_T_H_D.astype(jnp.float32)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x_B_T_H_D.dtype)


def rope(x_B_T_H_D: jax.Array, positions_B_T: jax.Array, inv_freq: np.ndarray | float) -> jax.Array:
    """Rotary embedding of x at the given positions. A float `inv_freq` is read as theta
    (unscaled frequencies)."""
    if np.isscalar(inv_freq):
        inv_freq = rope_inv_freq(x_B_T_H_D.shape[-1], float(inv_freq))
    return apply_rope(x_B_T_H_D, *rope_tables(positions_B_T, inv_freq))
