"""Policy model: prefill + decode_step equal the full forward; GQA/bias/untied variants;
attention and RoPE against numpy float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.config import ModelConfig
from rlvr_jax.models import policy
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.models.rope import positions_from_mask, rope, rope_for
from tests.helpers import scale_weights

VOCAB = 37


def _incremental_logits(model, params, cfg, tokens, mask, prompt_len):
    """Prefill `prompt_len` slots, then decode the rest one token at a time through the cache;
    returns the logits at positions prompt_len-1 .. T-1."""
    b, t = tokens.shape
    apply = lambda method, *a: model.apply({"params": params}, *a, method=method)
    logits, cache = jax.jit(lambda tok, m: apply("prefill", tok, m, t))(
        tokens[:, :prompt_len], mask[:, :prompt_len])
    out = [logits]
    rope_B_T = rope_for(cfg, positions_from_mask(mask))
    step = jax.jit(lambda *a: apply("decode_step", *a))
    for i in range(prompt_len, t):
        logits, cache = step(tokens[:, i], mask[:, i].astype(bool),
                             (rope_B_T[0][:, i], rope_B_T[1][:, i]), cache, jnp.int32(i))
        out.append(logits)
    return jnp.stack(out, axis=1)


@pytest.mark.parametrize("variant", [
    dict(),  # GQA 4 heads / 2 kv heads, tied embeddings
    dict(num_kv_heads=1, qkv_bias=True, tie_embeddings=False),  # MQA, Qwen2-style bias
    dict(num_kv_heads=4, head_dim=16),  # MHA with explicit head_dim != hidden / heads
])
def test_prefill_and_decode_match_full_forward(variant):
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, **variant)
    model = Decoder(cfg, VOCAB)
    params = init_params(model, jax.random.key(0))
    # Larger init than the default so the logits are far from uniform and differences show.
    params = scale_weights(params, 5.0)
    b, prompt_len, t = 3, 5, 11
    tokens = jax.random.randint(jax.random.key(1), (b, t), 3, VOCAB)
    mask = np.ones((b, t), np.int32)
    mask[0, :2] = 0  # left padding of different lengths
    mask[1, :4] = 0
    mask[2, 8] = 0  # a pad token mid-response (a finished row): later queries must skip it
    mask = jnp.asarray(mask)
    full = jax.jit(lambda p: model.apply({"params": p}, tokens, mask, method="logits"))(params)
    inc = _incremental_logits(model, params, cfg, tokens, mask, prompt_len)
    valid = np.asarray(mask).astype(bool)[:, prompt_len - 1:]
    # A wrong cache slot, position or mask would differ by O(1) here.
    np.testing.assert_allclose(np.asarray(inc)[valid], np.asarray(full[:, prompt_len - 1:])[valid],
                               rtol=1e-5, atol=1e-5)
    assert float(jnp.std(full)) > 0.5


def test_prefill_cache_holds_the_forward_keys_and_the_last_logits():
    """prefill's last logits are the full forward's at the last position (left padding
    included); slots past the prompt are empty and marked invalid."""
    cfg = ModelConfig(hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2,
                      intermediate_size=64, qkv_bias=True, tie_embeddings=False)
    model = Decoder(cfg, VOCAB)
    params = scale_weights(init_params(model, jax.random.key(0)), 8.0)
    tokens = jax.random.randint(jax.random.key(4), (3, 6), 3, VOCAB)
    mask = jnp.asarray(np.array([[1] * 6, [0, 0, 1, 1, 1, 1], [0] * 5 + [1]], np.int32))
    full = model.apply({"params": params}, tokens, mask, method="logits")
    last, cache = model.apply({"params": params}, tokens, mask, 9, method="prefill")
    assert last.shape == (3, VOCAB)
    np.testing.assert_allclose(np.asarray(last), np.asarray(full[:, -1]), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(cache.valid_B_S),
                                  np.pad(np.asarray(mask, bool), ((0, 0), (0, 3))))
    assert len(cache.k_N_B_S_K_H) == len(cache.v_N_B_S_K_H) == 3  # a buffer per layer
    assert {x.shape for x in cache.k_N_B_S_K_H + cache.v_N_B_S_K_H} == {(3, 9, 2, 8)}
    k0 = np.asarray(cache.k_N_B_S_K_H[0])
    assert not np.any(k0[:, 6:]) and np.any(k0[:, :6])
    assert float(jnp.std(full[:, -1])) > 0.5


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_attend_against_numpy_float64(dtype):
    """GQA attention against a float64 softmax over the unmasked slots (2 kv heads shared by
    4 query heads; one row with a masked slot), at odd lengths."""
    rng = np.random.default_rng(0)
    b, t, s, nh, nkv, h = 2, 3, 7, 4, 2, 5
    q, k, v = (jnp.asarray(rng.normal(size=shape), dtype)
               for shape in [(b, t, nh, h), (b, s, nkv, h), (b, s, nkv, h)])
    mask = np.ones((b, t, s), bool)
    mask[0, :, 2] = False
    mask[1, 0, 4:] = False
    got = jax.jit(policy.attend)(q, k, v, jnp.asarray(mask))
    assert got.shape == (b, t, nh * h) and got.dtype == dtype
    q64, k64, v64 = (np.asarray(x, np.float64) for x in (q, k, v))
    kv_of = np.arange(nh) // (nh // nkv)
    scores = np.einsum("btnh,bsnh->bnts", q64, k64[:, :, kv_of]) / np.sqrt(h)
    scores = np.where(mask[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    want = np.einsum("bnts,bsnh->btnh", probs, v64[:, :, kv_of]).reshape(b, t, nh * h)
    tol = 1e-5 if dtype == jnp.float32 else 3e-2  # bfloat16 keeps 8 bits of mantissa
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


def test_left_padding_does_not_change_logits():
    """The same sequence with and without left padding gives the same logits (positions restart
    at the first real token, pad keys are masked)."""
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)
    model = Decoder(cfg, VOCAB)
    params = init_params(model, jax.random.key(0))
    seq = jax.random.randint(jax.random.key(2), (1, 6), 3, VOCAB)
    padded = jnp.concatenate([jnp.zeros((1, 3), jnp.int32), seq], axis=1)
    pmask = jnp.array([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    logits = jax.jit(lambda t, m: model.apply({"params": params}, t, m, method="logits"))
    a, b = logits(seq, jnp.ones_like(seq)), logits(padded, pmask)
    np.testing.assert_allclose(np.asarray(b[:, 3:]), np.asarray(a), rtol=1e-5, atol=1e-6)


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
    assert set(params) == {"embed_tokens", "layers", "norm", "lm_head"}
    attn = params["layers"]["self_attn"]  # the 2 blocks stacked on a leading axis
    assert set(attn) == {"qkv_proj", "o_proj"}  # q, k, v fused (policy.py's docstring)
    assert attn["qkv_proj"]["kernel"].shape == (2, 32, 32 + 2 * 2 * 8)
    assert attn["qkv_proj"]["bias"].shape == (2, 32 + 2 * 2 * 8)
    assert set(params["layers"]["mlp"]) == {"gate_up_proj", "down_proj"}
    assert params["layers"]["input_layernorm"]["weight"].shape == (2, 32)
    assert "bias" not in attn["o_proj"]


def _grouped_rows(p=3, g=4, l=6, r=5, seed=0, vocab=VOCAB):
    """P prompts (left padding of 0, 3 and 1 slots), G rows each with its own right-padded
    response (one empty) and a pad mid-response (a multi-turn row's attended-to gap)."""
    rng = np.random.default_rng(seed)
    prompt = np.repeat(rng.integers(3, vocab, (p, l)), g, 0)
    pmask = np.ones((p, l), np.int32)
    pmask[1, :3], pmask[2, :1] = 0, 0
    lengths = rng.integers(1, r + 1, p * g)
    lengths[5] = 0
    rmask = (np.arange(r)[None] < lengths[:, None]).astype(np.int32)
    rmask[2, 1] = 0
    tokens = np.concatenate([prompt, rng.integers(3, vocab, (p * g, r))], 1).astype(np.int32)
    return tokens, np.concatenate([np.repeat(pmask, g, 0), rmask], 1)


@pytest.mark.parametrize("variant", [
    dict(),
    dict(num_kv_heads=1, qkv_bias=True, tie_embeddings=False, remat="dots"),
    dict(num_kv_heads=4, head_dim=16, remat="full"),
])
def test_each_groups_prompt_computed_once_gives_the_full_forward(variant):
    """response_hidden with G = 4 (the prompt's first L-1 slots computed once per group,
    broadcast to its rows) against the full forward over prompt ++ response: hidden states
    and the gradient of a loss on them agree to float32 rounding. A wrong position, mask
    or broadcast would differ by O(1) (the weights are scaled up)."""
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                      **variant)
    model = Decoder(cfg, VOCAB)
    params = scale_weights(init_params(model, jax.random.key(0)), 3.0)
    tokens, mask = _grouped_rows()
    l, valid = 6, mask[:, 5:-1].astype(bool)
    w = jax.random.normal(jax.random.key(2), (tokens.shape[0], 5, 32))
    hidden = lambda prm, g: model.apply({"params": prm}, tokens, mask, l, g,
                                        method="response_hidden")
    loss = lambda prm, g: jnp.sum(jnp.tanh(hidden(prm, g)) * w * valid[..., None])
    both = jax.jit(lambda prm, g: (hidden(prm, g), jax.grad(loss)(prm, g)), static_argnums=1)
    (full, g_full), (shared, g_shared) = both(params, 1), both(params, 4)
    assert shared.shape == full.shape == (12, 5, 32)
    np.testing.assert_allclose(np.asarray(shared)[valid], np.asarray(full)[valid],
                               rtol=1e-5, atol=1e-5)
    assert float(jnp.std(full[valid])) > 0.5
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5 * float(np.abs(a).max())),
        g_full, g_shared)


def test_a_one_slot_prompt_has_nothing_to_share():
    """L = 1: the last prompt slot goes with the rows, so nothing is left to compute once;
    the full forward is used (same values)."""
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=4, intermediate_size=64)
    model = Decoder(cfg, VOCAB)
    params = init_params(model, jax.random.key(0))
    tokens, mask = _grouped_rows(l=1)
    mask[:, 0] = 1
    f = lambda g: model.apply({"params": params}, tokens, mask, 1, g, method="response_hidden")
    np.testing.assert_array_equal(np.asarray(f(4)), np.asarray(f(1)))
