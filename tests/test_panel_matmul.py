"""The decode products' CPU kernel (rlvr_jax/ops/panel_matmul.py) against numpy float64, under
jit and shardings, and the sampler with it against the sampler without it."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax import sharding
from rlvr_jax.config import ModelConfig
from rlvr_jax.models import panels
from rlvr_jax.models.policy import Decoder, KVCache, init_params
from rlvr_jax.ops import panel_matmul as pm
from rlvr_jax import sampling

# CI sets RLVR_REQUIRE_CPU_KERNELS=1 (.ci/run): there the kernel must build, never skip.
needs_kernel = pytest.mark.skipif(
    not pm.available() and os.environ.get("RLVR_REQUIRE_CPU_KERNELS") != "1",
    reason=f"panel_matmul unavailable here: {pm.why_unavailable()}")


def test_kernel_is_available_where_required():
    if os.environ.get("RLVR_REQUIRE_CPU_KERNELS") == "1":
        assert pm.available(), pm.why_unavailable()


def test_pack_panels_layout():
    w = np.arange(3 * 48, dtype=np.float32).reshape(3, 48)
    packed = np.asarray(pm.pack_panels(jnp.asarray(w)))  # the kernel's pack where available
    assert packed.shape == (3, 3, 16)
    for p in range(3):
        np.testing.assert_array_equal(packed[p], w[:, 16 * p:16 * p + 16])
    with pytest.raises(ValueError, match="multiple of 16"):
        pm.pack_panels(jnp.zeros((4, 20)))


@needs_kernel
@pytest.mark.parametrize("m,k,n", [(1, 1, 16), (5, 7, 32), (13, 96, 48), (64, 512, 1024),
                                   (67, 33, 160)])
def test_panel_matmul_against_numpy_float64(m, k, n):
    """Every row-tail size (M mod 6 = 1, 5, 1, 4, 1 here), odd K, one to 64 panels, jitted."""
    rng = np.random.default_rng(m * 1000 + k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    y = jax.jit(lambda x, w: pm.panel_matmul(x, pm.pack_panels(w)))(x, w)
    ref = x.astype(np.float64) @ w.astype(np.float64)
    assert y.shape == (m, n) and y.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@needs_kernel
def test_panel_matmul_rejects_bad_operands():
    with pytest.raises(ValueError, match="float32"):
        pm.panel_matmul(jnp.zeros((2, 8)), jnp.zeros((1, 4, 16)))  # K mismatch
    with pytest.raises(ValueError, match="float32"):
        pm.panel_matmul(jnp.zeros((2, 8), jnp.bfloat16), jnp.zeros((1, 8, 16), jnp.bfloat16))


@needs_kernel
@pytest.mark.parametrize("x_spec,w_spec", [(("data",), ()), (("data",), ("data",)),
                                           ((), ("data",)), ((None, "data"), ())])
def test_panel_matmul_sharded_runs_per_device(x_spec, w_spec):
    """On 8 devices, the same result as numpy: rows of x split (the sampler's case: no gather
    around the call), panels of w split, both on one axis (w gathered), x split along K."""
    mesh = sharding.make_mesh(data=8, fsdp=1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    w = rng.standard_normal((32, 128)).astype(np.float32)
    w_p = np.asarray(pm.pack_panels(jnp.asarray(w)))
    named = lambda spec: jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
    xs, ws = jax.device_put(x, named(x_spec)), jax.device_put(w_p, named(w_spec))
    f = jax.jit(pm.panel_matmul)
    np.testing.assert_allclose(np.asarray(f(xs, ws)), x.astype(np.float64) @ w, rtol=1e-5,
                               atol=1e-5)
    if x_spec == ("data",) and w_spec == ():  # the sampler's case: rows split, w replicated
        assert "all-gather" not in f.lower(xs, ws).compile().as_text()


def test_unsupported_host_is_reported_not_raised():
    """No compiler (or RLVR_JAX_CPU_KERNELS=0): available() is False with the reason, and the
    sampler keeps XLA's products."""
    code = ("from rlvr_jax.ops import panel_matmul as pm; "
            "print(pm.available(), pm.why_unavailable())")
    for env in ({"CXX": "/nonexistent/c++"}, {"RLVR_JAX_CPU_KERNELS": "0"}):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, **env}, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("False"), out.stdout
        assert ("no C++ compiler" in out.stdout) if "CXX" in env else ("disabled" in out.stdout)


def _model():
    # Widths multiples of 16 (packed) except the vocabulary (20: its lm_head stays XLA's).
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=48, tie_embeddings=False)
    model = Decoder(cfg, 20)
    params = init_params(model, jax.random.key(0))
    return cfg, model, jax.tree.map(lambda x: x * 8.0 if x.ndim == 2 else x, params)


@needs_kernel
def test_decode_step_with_packed_params_matches():
    cfg, model, params = _model()
    packed = panels.pack_decode_params(params)
    layer = packed["layers_0"]
    assert "panels" in layer["mlp"]["gate_up_proj"] and "kernel" not in layer["mlp"]["gate_up_proj"]
    assert layer["self_attn"]["qkv_proj"]["panels"].shape == (4, 32, 16)
    assert "kernel" in packed["lm_head"], "20 columns are not a multiple of 16: left as is"
    b, p = 5, 3
    tokens = jax.random.randint(jax.random.key(1), (b, p), 2, 20)
    mask = jnp.ones((b, p), jnp.int32)
    cache = KVCache.zeros(cfg, b, p + 1)
    _, cache = model.apply({"params": params}, tokens, mask, cache=cache, cache_index=0)
    step = lambda prm: model.apply({"params": prm}, tokens[:, :1], mask[:, :1],
                                   jnp.full((b, 1), p), cache=cache, cache_index=p)[0]
    got = jax.jit(step)(packed)
    want = jax.jit(step)(params)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    assert "rlvr_panel_matmul" in jax.jit(step).lower(packed).as_text()


@needs_kernel
def test_sampler_with_kernel_samples_what_xla_samples(monkeypatch):
    """Same prompts and key: the decode steps through the kernel give the same tokens and
    masks (rows stopping at EOS included) and log-probs as XLA's products."""
    cfg, model, params = _model()
    assert panels.decode_panels(cfg, 7) and not panels.decode_panels(cfg, 257)
    b, p, n = 7, 4, 6
    prompt = jax.random.randint(jax.random.key(3), (b, p), 2, 20)
    pmask = jnp.ones((b, p), jnp.int32).at[:2, :2].set(0)
    out = {}
    for use in (True, False):
        monkeypatch.setattr(sampling, "decode_panels", lambda cfg, batch, use=use: use)
        sample = sampling.make_sampler(model, max_new_tokens=n, eos_id=1, pad_id=0,
                                       temperature=1.0)
        args = (params, KVCache.zeros(cfg, b, p + n), prompt, pmask, jax.random.key(0))
        assert ("rlvr_panel_matmul" in sample.lower(*args).as_text()) == use
        out[use] = [np.asarray(x) for x in sample(*args)[1]]
    np.testing.assert_array_equal(out[True][0], out[False][0])
    np.testing.assert_array_equal(out[True][2], out[False][2])
    np.testing.assert_allclose(out[True][1], out[False][1], rtol=1e-5, atol=1e-5)
