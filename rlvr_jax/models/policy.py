"""Decoder-only policy LM of the Llama / Qwen2 family in flax.linen.

RMSNorm (Zhang & Sennrich 2019), rotary position embeddings in the "rotate half" layout that
HF Llama/Qwen2 use (Su et al. 2021, arXiv:2104.09864), grouped-query attention (Ainslie et al.
2023, arXiv:2305.13245), SwiGLU MLP (Shazeer 2020), optional q/k/v bias (Qwen2) and tied
embeddings. Parameter names follow the HF module names, except that q/k/v and gate/up are
stored fused, as vLLM does: `qkv_proj` (kernel [D, (Nh + 2 Nkv) Hd]) and `gate_up_proj`
([D, 2 F]), each one matmul. Why: a decode step's products are small (M = batch), and one
product instead of three (two) made the tiny benchmark model's sampler ~8% faster on XLA:CPU.
Concatenating separate kernels inside the jitted sampler instead copied every layer's kernels
on each call (~85 ms of a ~2.3 s rollout of the small benchmark model,
experiments/bench/sampler.py). HF import joins the kernels and export splits them (hf.py).

One call signature serves training, prefill and decode:

    logits_B_T_V, cache = Decoder(cfg, vocab).apply({"params": p}, tokens_B_T, input_mask_B_T,
                                                    positions_B_T, cache=None | KVCache,
                                                    cache_index=slot of tokens_B_T[:, 0])

Without a cache, attention runs over `tokens_B_T` itself (causal, pad keys masked). With a
cache of S slots, the new keys/values are written at `cache_index .. cache_index+T` and each
query attends to the slots at or before its own whose `cache.valid_B_S` flag is set. The cache
is an explicit pytree, never a flax mutable collection: the sampler owns it, donates it and
threads it through `lax.while_loop`.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax.config import ModelConfig
from rlvr_jax.ops import panel_matmul


class KVCache(NamedTuple):
    # Layouts chosen for the decode step on XLA:CPU (experiments/bench/sampler.py): heads before
    # slots, keys transposed so that q . k sums over a non-minor axis with the slots contiguous
    # (2x faster than [S, H] there), values [S, H] so that probs . v sums over slots vectorised
    # along H (see decode_scores, decode_mix).
    k: tuple  # per layer: [B, num_kv_heads, head_dim, S]
    v: tuple  # per layer: [B, num_kv_heads, S, head_dim]
    valid_B_S: jax.Array  # bool: slot holds a real (non-pad) token

    @staticmethod
    def zeros(cfg: ModelConfig, batch: int, slots: int) -> "KVCache":
        b, nkv, hd, dt = batch, cfg.num_kv_heads, cfg.resolved_head_dim, jnp.dtype(cfg.compute_dtype)
        return KVCache(k=tuple(jnp.zeros((b, nkv, hd, slots), dt) for _ in range(cfg.num_layers)),
                       v=tuple(jnp.zeros((b, nkv, slots, hd), dt) for _ in range(cfg.num_layers)),
                       valid_B_S=jnp.zeros((batch, slots), bool))


def positions_from_mask(input_mask_B_T: jax.Array) -> jax.Array:
    """Position ids that start at 0 on the first real token (left padding gets position 0)."""
    return jnp.maximum(jnp.cumsum(input_mask_B_T.astype(jnp.int32), axis=-1) - 1, 0)


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


class RMSNorm(nn.Module):
    eps: float
    dtype: jnp.dtype
    param_dtype: jnp.dtype

    @nn.compact
    def __call__(self, x):
        scale = self.param("weight", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return x32.astype(self.dtype) * scale.astype(self.dtype).reshape((1,) * (x.ndim - 1) + (-1,))


class Weights(nn.Module):
    """The kernel [in, features] (and bias) of one projection; `project` takes the product."""

    features: int
    use_bias: bool
    param_dtype: jnp.dtype
    init_std: float

    @nn.compact
    def __call__(self, in_features: int):
        if self.has_variable("params", "panels"):  # packed by `panels.pack_decode_params`
            kernel = self.get_variable("params", "panels")
        else:
            kernel = self.param("kernel", nn.initializers.normal(self.init_std),
                                (in_features, self.features), self.param_dtype)
        bias = (self.param("bias", nn.initializers.zeros, (self.features,), self.param_dtype)
                if self.use_bias else None)
        return kernel, bias


def project(x, kernel, bias, dtype, sizes: tuple[int, ...] | None = None):
    """`x @ kernel (+ bias)` on x with its leading dimensions flattened; with `sizes`, the
    output split into consecutive blocks of those widths (a fused projection, below).

    Why flattened: the kernel gradient of a [B, T, D] x [D, F] product (a contraction over both
    B and T) ran about 2x slower than the same product on [B*T, D].

    A kernel [F/16, D, 16] is one packed into panels by `panels.pack_decode_params` (the
    sampler's decode steps on CPU): its product is `panel_matmul`'s."""
    if kernel.ndim == 3:
        y = panel_matmul.panel_matmul(x.reshape(-1, x.shape[-1]).astype(dtype), kernel)
    else:
        y = x.reshape(-1, x.shape[-1]).astype(dtype) @ kernel.astype(dtype)
    if bias is not None:
        y = y + bias.astype(dtype)[None, :]
    y = y.reshape(*x.shape[:-1], y.shape[-1])
    if sizes is None:
        return y
    return jnp.split(y, np.cumsum(sizes)[:-1], axis=-1)


def qkv_sizes(cfg: ModelConfig) -> tuple[int, int, int]:
    """Widths of the q, k and v blocks of the fused `qkv_proj` output, in that order."""
    hd = cfg.resolved_head_dim
    return cfg.num_heads * hd, cfg.num_kv_heads * hd, cfg.num_kv_heads * hd


def gate_up_sizes(cfg: ModelConfig) -> tuple[int, int]:
    """Widths of the gate and up blocks of the fused `gate_up_proj` output, in that order."""
    return cfg.intermediate_size, cfg.intermediate_size


def _weights(cfg: ModelConfig, features: int, name: str, bias: bool = False) -> Weights:
    return Weights(features, bias, jnp.dtype(cfg.param_dtype), cfg.init_std, name=name)


def _dense(cfg: ModelConfig, features: int, name: str, bias: bool = False):
    w = _weights(cfg, features, name, bias)
    return lambda x: project(x, *w(x.shape[-1]), jnp.dtype(cfg.compute_dtype))


# Decode attention writes its sums out term by term (`_unrolled`) on CPU within these sizes.
# Measured on the small benchmark model (experiments/bench/sampler.py, batch 64): the whole
# sampler ran ~5% faster at 48, 64 and 96 cache slots, but ~5% slower at 128, and the unrolled
# HLO's compile time grows with the length. Below the minimum cache size (elements of one
# layer's key cache, all devices together) the tiny benchmark model's sampler, on two devices
# with one core each, ran ~3% slower unrolled: it is the splitting across cores that pays.
UNROLL_MAX_SLOTS, UNROLL_MAX_HEAD_DIM, UNROLL_MIN_CACHE = 64, 128, 2**19
# Where the sums are unrolled, the sampler's decode loop runs in phases whose steps read only
# the first multiple of PHASE_SLOTS cache slots that holds every slot written so far
# (`decode_phases`). Measured on the small benchmark model (48 slots, two phases: 32, then all
# 48): the sampler ran 2.4-7.9% faster in four of five paired in-process A/Bs (the fifth saw no
# difference); its first call (trace, compile, run) took 15 s instead of 11.
PHASE_SLOTS = 16


def _unrolled(batch: int, kv_heads: int, head_dim: int, slots: int) -> bool:
    """Whether the decode attention's sums over H and over the slots are written out as one
    broadcast product per term, added pairwise, instead of a reduce.

    On XLA:CPU a reduce runs on one core, and the decode step's reduces were slow there
    (~4 GB/s over the small benchmark model's cache). The written-out sum is a single
    elementwise loop fusion, which XLA:CPU splits across cores when it is big enough and
    vectorises along the minor axis: the small model's decode attention ran about 2x faster
    (48 slots). Other backends keep the reduce.
    """
    return (jax.default_backend() == "cpu" and slots <= UNROLL_MAX_SLOTS
            and head_dim <= UNROLL_MAX_HEAD_DIM
            and batch * kv_heads * head_dim * slots >= UNROLL_MIN_CACHE)


def decode_phases(cfg: ModelConfig, batch: int, slots: int) -> tuple[int, ...]:
    """Slot counts below `slots` at which a decode loop over a cache of `slots` slots may start
    a new phase: every multiple of PHASE_SLOTS, on the unrolled path only, whose fusion reads
    a prefix of the cache in place (XLA:CPU copied a prefix sliced for the reduce, every step);
    () for a single phase."""
    if not _unrolled(batch, cfg.num_kv_heads, cfg.resolved_head_dim, slots):
        return ()
    return tuple(range(PHASE_SLOTS, slots, PHASE_SLOTS))


def _pairwise_sum(terms: list) -> jax.Array:
    while len(terms) > 1:  # rounding error grows with log n, not n
        pairs = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        terms = pairs + terms[2 * len(pairs):]
    return terms[0]


def decode_scores(q_B_K_G_H: jax.Array, k_B_K_H_S: jax.Array,
                  attend_slots: Optional[int] = None) -> jax.Array:
    """scores[b, k, g, s] = sum_h q[b, k, g, h] key[b, k, h, s], in float32, for the first
    `attend_slots` cache slots (default all): one query per row (a decode step) against the
    cache, G query heads sharing each kv head. The path (`_unrolled`) is chosen by the whole
    cache's size, so that every phase of a decode loop takes the same one."""
    q, k = q_B_K_G_H.astype(jnp.float32), k_B_K_H_S.astype(jnp.float32)
    b, kv_heads, head_dim, slots = k.shape
    n = slots if attend_slots is None else attend_slots
    if _unrolled(b, kv_heads, head_dim, slots):  # the prefix is read inside the one fusion
        return _pairwise_sum([q[:, :, :, h, None] * k[:, :, None, h, :n]
                              for h in range(head_dim)])
    return jnp.sum(q[..., None] * k[:, :, None, :, :n], axis=-2)


def decode_mix(probs_B_K_G_S: jax.Array, v_B_K_S_H: jax.Array) -> jax.Array:
    """out[b, k, g, h] = sum_s probs[b, k, g, s] value[b, k, s, h], in float32, over the
    first S' slots of the cache, S' = probs' last dimension (see `decode_scores`)."""
    p, v = probs_B_K_G_S.astype(jnp.float32), v_B_K_S_H.astype(jnp.float32)
    b, kv_heads, slots, head_dim = v.shape
    n = p.shape[-1]
    if _unrolled(b, kv_heads, head_dim, slots):
        return _pairwise_sum([p[:, :, :, s, None] * v[:, :, None, s, :] for s in range(n)])
    return jnp.sum(p[..., None] * v[:, :, None, :n], axis=-2)


class Attention(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x_B_T_D, rope_B_T, mask_B_T_S, kv: Optional[tuple], cache_index,
                 fresh_only: bool, last_only: bool, attend_slots: Optional[int] = None):
        """`fresh_only`: attend to this call's own keys only (a prefill into slot 0, see
        Decoder); `mask_B_T_S` then spans those T keys instead of the cache's slots.
        `last_only`: the output of the last query only ([B, 1, D]); keys/values are still
        those of all T positions. `attend_slots`: see Decoder."""
        cfg = self.cfg
        nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim
        b, t, d = x_B_T_D.shape
        sizes = qkv_sizes(cfg)
        q, k, v = project(x_B_T_D, *_weights(cfg, sum(sizes), "qkv_proj", cfg.qkv_bias)(d),
                          jnp.dtype(cfg.compute_dtype), sizes)
        q = q.reshape(b, t, nh, hd)
        k, v = k.reshape(b, t, nkv, hd), v.reshape(b, t, nkv, hd)
        q, k = apply_rope(q, *rope_B_T), apply_rope(k, *rope_B_T)
        # Keys as [B, K, H, S], values as [B, K, S, H] (the cache layout, see KVCache).
        k, v = jnp.transpose(k, (0, 2, 3, 1)), jnp.swapaxes(v, 1, 2)
        new_kv = (k, v)
        if kv is not None:  # write the new keys/values into their cache slots
            k_cache, v_cache = kv
            new_kv = (
                jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (0, 0, 0, cache_index)),
                jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (0, 0, cache_index, 0)))
            if not fresh_only:  # attend to all slots
                k, v = new_kv
        groups = nh // nkv
        q_B_T_K_G_H = q.reshape(b, t, nkv, groups, hd)
        if t == 1:  # decode: q . k over H, vectorised along the slots (see KVCache)
            scores = decode_scores(q_B_T_K_G_H[:, 0], k, attend_slots)[:, :, :, None, :]
        else:  # keys back to [B, K, S, H] for the einsum: over [B, K, H, S], XLA:CPU emits a
            # dot that cannot take bfloat16 operands with a float32 result
            scores = jnp.einsum("btkgh,bksh->bkgts", q_B_T_K_G_H, jnp.swapaxes(k, 2, 3),
                                preferred_element_type=jnp.float32)
        scores = scores / jnp.sqrt(jnp.float32(hd))
        # A finite minimum (not -inf): a fully masked row (a pad query) gives a uniform softmax
        # instead of NaN; its output is never used.
        scores = jnp.where(mask_B_T_S[:, None, None, :, :], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        if t == 1:  # decode: probs . v over the slots, vectorised along H
            out = decode_mix(probs[:, :, :, 0], v).astype(v.dtype)
        else:
            out = jnp.einsum("bkgts,bksh->btkgh", probs, v)
        out = out.reshape(b, t, nh * hd)
        if last_only:
            out = out[:, -1:]
        return _dense(cfg, cfg.hidden_size, "o_proj")(out), new_kv


class MLP(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        sizes = gate_up_sizes(cfg)
        gate, up = project(x, *_weights(cfg, sum(sizes), "gate_up_proj")(x.shape[-1]),
                           jnp.dtype(cfg.compute_dtype), sizes)
        return _dense(cfg, cfg.hidden_size, "down_proj")(nn.silu(gate) * up)


class Block(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x, rope_B_T, mask_B_T_S, kv, cache_index, fresh_only, last_only,
                 attend_slots=None):
        """`last_only`: return the last position's hidden state only ([B, 1, D])."""
        cfg = self.cfg
        dt, pdt = jnp.dtype(cfg.compute_dtype), jnp.dtype(cfg.param_dtype)
        h, kv = Attention(cfg, name="self_attn")(
            RMSNorm(cfg.rms_norm_eps, dt, pdt, name="input_layernorm")(x),
            rope_B_T, mask_B_T_S, kv, cache_index, fresh_only, last_only, attend_slots)
        x = (x[:, -1:] if last_only else x) + h
        x = x + MLP(cfg, name="mlp")(RMSNorm(cfg.rms_norm_eps, dt, pdt,
                                             name="post_attention_layernorm")(x))
        return x, kv


class Decoder(nn.Module):
    cfg: ModelConfig
    vocab_size: int

    @nn.compact
    def __call__(self, tokens_B_T, input_mask_B_T, positions_B_T=None,
                 cache: Optional[KVCache] = None, cache_index=0, output: str = "logits",
                 rope_B_T: Optional[tuple] = None, attend_slots: Optional[int] = None):
        """`output`: "logits" (float32 [B, T, V]), "last_logits" (float32 [B, V], the last
        position's only: a prefill needs no more, and [B, T, V] at a real vocabulary is large;
        the last layer then runs its o_proj and MLP on that position alone: no later layer
        reads the others, and its keys/values come before them),
        "hidden" (the final-normed hidden states [B, T, D] a value head reads, no vocabulary
        projection) or "both" (a tuple of logits and hidden).
        `rope_B_T`: the (cos, sin) tables of `rope_for(cfg, positions_B_T)`, when the caller
        has them already (the sampler computes a whole rollout's before its loop).
        `attend_slots`: a decode step (T = 1) with a cache attends to the first `attend_slots`
        slots only, which must hold slot `cache_index` (the sampler's phases, see
        `decode_phases`); None: all of them."""
        cfg = self.cfg
        dt, pdt = jnp.dtype(cfg.compute_dtype), jnp.dtype(cfg.param_dtype)
        valid_B_T = input_mask_B_T.astype(bool)
        if positions_B_T is None:
            positions_B_T = positions_from_mask(valid_B_T)
        t = tokens_B_T.shape[1]
        # Writing into slot 0 (a static 0: a prefill), queries can only see this call's own
        # keys, the slots after them being in their future: attention runs over those T keys
        # rather than all the cache's slots (less to read; the cache is still written).
        fresh_only = cache is None or (isinstance(cache_index, int) and cache_index == 0)
        if cache is not None:
            cache_valid_B_S = jax.lax.dynamic_update_slice(cache.valid_B_S, valid_B_T,
                                                           (0, cache_index))
        if fresh_only:
            q_slot, k_slot = jnp.arange(t), jnp.arange(t)
            key_valid_B_S = valid_B_T
        else:
            if attend_slots is not None and t != 1:
                raise ValueError(f"attend_slots is for decode steps (T = 1), got T = {t}")
            n = cache_valid_B_S.shape[1] if attend_slots is None else attend_slots
            q_slot, k_slot = cache_index + jnp.arange(t), jnp.arange(n)
            key_valid_B_S = cache_valid_B_S[:, :n]
        mask_B_T_S = (k_slot[None, :] <= q_slot[:, None])[None, :, :] & key_valid_B_S[:, None, :]

        embed = nn.Embed(self.vocab_size, cfg.hidden_size, dtype=dt, param_dtype=pdt,
                         embedding_init=nn.initializers.normal(cfg.init_std), name="embed_tokens")
        x = embed(tokens_B_T)
        if rope_B_T is None:
            rope_B_T = rope_for(cfg, positions_B_T)
        new_k, new_v = [], []
        for i in range(cfg.num_layers):
            kv = None if cache is None else (cache.k[i], cache.v[i])
            last_only = output == "last_logits" and i == cfg.num_layers - 1
            x, (k, v) = Block(cfg, name=f"layers_{i}")(x, rope_B_T, mask_B_T_S, kv, cache_index,
                                                        fresh_only, last_only, attend_slots)
            new_k.append(k)
            new_v.append(v)
        x = RMSNorm(cfg.rms_norm_eps, dt, pdt, name="norm")(x)
        new_cache = None if cache is None else KVCache(tuple(new_k), tuple(new_v), cache_valid_B_S)
        if output == "hidden":
            return x, new_cache
        if output == "last_logits":
            x = x[:, -1]
        if cfg.tie_embeddings:
            logits = embed.attend(x)
        else:
            logits = _dense(cfg, self.vocab_size, "lm_head")(x)
        logits = logits.astype(jnp.float32)
        return ((logits, x) if output == "both" else logits), new_cache


def init_params(model: Decoder, key: jax.Array) -> dict:
    tokens = jnp.zeros((1, 2), jnp.int32)
    return model.init(key, tokens, jnp.ones((1, 2), jnp.int32))["params"]
