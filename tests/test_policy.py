"""Policy model: KV-cache decode equals the full forward; GQA/bias/untied variants; RoPE."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.config import ModelConfig
from rlvr_jax.models import policy
from rlvr_jax.models.policy import Decoder, KVCache, init_params, positions_from_mask, rope

VOCAB = 37


def _incremental_logits(model, params, cfg, tokens, mask, prompt_len):
    """Prefill `prompt_len` slots, then decode the rest one token at a time through the cache."""
    b, t = tokens.shape
    cache = KVCache.zeros(cfg, b, t)
    apply = jax.jit(lambda p, *a, **kw: model.apply({"params": p}, *a, **kw),
                    static_argnames=("cache_index",))
    logits, cache = apply(params, tokens[:, :prompt_len], mask[:, :prompt_len], cache=cache,
                          cache_index=0)
    out = [logits]
    pos = positions_from_mask(mask)
    for i in range(prompt_len, t):
        logits, cache = apply(params, tokens[:, i:i + 1], mask[:, i:i + 1], pos[:, i:i + 1],
                              cache=cache, cache_index=i)
        out.append(logits)
    return jnp.concatenate(out, axis=1)


# The decode attention's two ways to sum (policy._unrolled): a reduce, and one term per
# element written out (on CPU, for a short cache).
BOTH_SUMS = pytest.mark.parametrize("max_slots", [0, policy.UNROLL_MAX_SLOTS],
                                    ids=["reduce", "unrolled"])


@BOTH_SUMS
@pytest.mark.parametrize("variant", [
    dict(),  # GQA 4 heads / 2 kv heads, tied embeddings
    dict(num_kv_heads=1, qkv_bias=True, tie_embeddings=False),  # MQA, Qwen2-style bias
    dict(num_kv_heads=4, head_dim=16),  # MHA with explicit head_dim != hidden / heads
])
def test_kv_cache_decode_matches_full_forward(variant, max_slots, monkeypatch):
    monkeypatch.setattr(policy, "UNROLL_MAX_SLOTS", max_slots)
    monkeypatch.setattr(policy, "UNROLL_MIN_CACHE", 0)
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, **variant)
    model = Decoder(cfg, VOCAB)
    params = init_params(model, jax.random.key(0))
    # Larger init than the default so the logits are far from uniform and differences show.
    params = jax.tree.map(lambda x: x * 5.0 if x.ndim == 2 else x, params)
    b, prompt_len, t = 3, 5, 11
    tokens = jax.random.randint(jax.random.key(1), (b, t), 3, VOCAB)
    mask = np.ones((b, t), np.int32)
    mask[0, :2] = 0  # left padding of different lengths
    mask[1, :4] = 0
    mask = jnp.asarray(mask)
    full, _ = jax.jit(lambda p: model.apply({"params": p}, tokens, mask))(params)
    inc = _incremental_logits(model, params, cfg, tokens, mask, prompt_len)
    valid = np.asarray(mask).astype(bool)
    # A wrong cache slot, position or mask would differ by O(1) here.
    np.testing.assert_allclose(np.asarray(inc)[valid], np.asarray(full)[valid], rtol=1e-5,
                               atol=1e-5)
    assert float(jnp.std(full)) > 0.5


def test_last_logits_prefill_matches_full_forward_and_writes_the_same_cache():
    """output="last_logits" (the sampler's prefill, whose last layer runs o_proj and the MLP
    on the last position only) gives the full forward's last-position logits, with left
    padding, and leaves every layer's cache as the full prefill does."""
    cfg = ModelConfig(hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2,
                      intermediate_size=64, qkv_bias=True, tie_embeddings=False)
    model = Decoder(cfg, VOCAB)
    params = jax.tree.map(lambda x: x * 5.0 if x.ndim == 2 else x,
                          init_params(model, jax.random.key(0)))
    tokens = jax.random.randint(jax.random.key(4), (3, 6), 3, VOCAB)
    mask = jnp.asarray(np.array([[1] * 6, [0, 0, 1, 1, 1, 1], [0] * 5 + [1]], np.int32))
    run = jax.jit(lambda p, output: model.apply({"params": p}, tokens, mask,
                                                cache=KVCache.zeros(cfg, 3, 9), cache_index=0,
                                                output=output), static_argnums=1)
    full, full_cache = run(params, "logits")
    last, last_cache = run(params, "last_logits")
    assert last.shape == (3, VOCAB)
    np.testing.assert_allclose(np.asarray(last), np.asarray(full[:, -1]), rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(full_cache), jax.tree.leaves(last_cache)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(jnp.std(full[:, -1])) > 0.5


def test_left_padding_does_not_change_logits():
    """The same sequence with and without left padding gives the same logits (positions restart
    at the first real token, pad keys are masked)."""
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)
    model = Decoder(cfg, VOCAB)
    params = init_params(model, jax.random.key(0))
    seq = jax.random.randint(jax.random.key(2), (1, 6), 3, VOCAB)
    padded = jnp.concatenate([jnp.zeros((1, 3), jnp.int32), seq], axis=1)
    pmask = jnp.array([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    a, _ = model.apply({"params": params}, seq, jnp.ones_like(seq))
    b, _ = model.apply({"params": params}, padded, pmask)
    np.testing.assert_allclose(np.asarray(b[:, 3:]), np.asarray(a), rtol=1e-5, atol=1e-6)


@BOTH_SUMS
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_decode_attention_sums_against_numpy_float64(max_slots, dtype, monkeypatch):
    """decode_scores / decode_mix against float64 einsums of the same (dtype-rounded) inputs,
    at odd lengths (5 head dims, 7 slots: the pairwise sum carries a lone term)."""
    monkeypatch.setattr(policy, "UNROLL_MAX_SLOTS", max_slots)
    monkeypatch.setattr(policy, "UNROLL_MIN_CACHE", 0)
    rng = np.random.default_rng(0)
    b, k, g, h, s = 3, 2, 2, 5, 7
    q, key, v = (jnp.asarray(rng.normal(size=shape), dtype)
                 for shape in [(b, k, g, h), (b, k, h, s), (b, k, s, h)])
    probs = jnp.asarray(rng.dirichlet(np.ones(s), size=(b, k, g)), dtype)
    f64 = lambda x: np.asarray(x, np.float64)
    assert policy._unrolled(b, k, h, s) == (max_slots > 0)
    # Fresh lambdas: jit's cache would otherwise hand back the other parametrisation's trace.
    scores = jax.jit(lambda *a: policy.decode_scores(*a))(q, key)
    mixed = jax.jit(lambda *a: policy.decode_mix(*a))(probs, v)
    assert scores.dtype == mixed.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(scores), np.einsum("bkgh,bkhs->bkgs", f64(q), f64(key)),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mixed), np.einsum("bkgs,bksh->bkgh", f64(probs), f64(v)),
                               rtol=1e-5, atol=1e-6)
    # A decode phase's prefix of the cache: the first 4 slots only.
    scores4 = jax.jit(lambda *a: policy.decode_scores(*a, 4))(q, key)
    mixed4 = jax.jit(lambda *a: policy.decode_mix(*a))(probs[..., :4], v)
    np.testing.assert_allclose(np.asarray(scores4),
                               np.einsum("bkgh,bkhs->bkgs", f64(q), f64(key)[..., :4]),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mixed4),
                               np.einsum("bkgs,bksh->bkgh", f64(probs)[..., :4], f64(v)[:, :, :4]),
                               rtol=1e-5, atol=1e-6)


def test_rope_against_numpy_float64():
    x = np.random.default_rng(0).normal(size=(2, 3, 1, 8))
    pos = np.array([[0, 1, 5], [2, 3, 4]])
    theta = 10000.0
    inv = 1.0 / theta ** (np.arange(0, 8, 2) / 8)
    ang = pos[..., None] * inv
    cos, sin = np.cos(ang)[:, :, None], np.sin(ang)[:, :, None]
    x1, x2 = x[..., :4], x[..., 4:]
    want = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    got = rope(jnp.asarray(x, jnp.float32), jnp.asarray(pos), theta)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    # Position 0 is the identity.
    np.testing.assert_allclose(np.asarray(got)[0, 0], x[0, 0], rtol=1e-6)


def test_param_tree_uses_hf_names():
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                      qkv_bias=True, tie_embeddings=False)
    params = init_params(Decoder(cfg, VOCAB), jax.random.key(0))
    assert set(params) == {"embed_tokens", "layers_0", "layers_1", "norm", "lm_head"}
    attn = params["layers_0"]["self_attn"]
    assert set(attn) == {"qkv_proj", "o_proj"}  # q, k, v fused (policy.py's docstring)
    assert attn["qkv_proj"]["kernel"].shape == (32, 32 + 2 * 2 * 8) and "bias" in attn["qkv_proj"]
    assert set(params["layers_0"]["mlp"]) == {"gate_up_proj", "down_proj"}
    assert "bias" not in attn["o_proj"]
