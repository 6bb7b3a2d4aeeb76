"""Sampler: top-k / top-p masking against numpy; EOS stopping, masks and log-probs; one compile."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.sampling import draw_inverse_cdf, filter_logits, make_sampler
from tests.helpers import hlo_computations, scale_weights


def _np_filter(logits, top_k, top_p):
    """float64 reference: explicit sort, keep top-k, then the smallest prefix reaching top_p."""
    out = logits.astype(np.float64).copy()
    for row in out:
        order = np.argsort(-row, kind="stable")
        if top_k:
            row[order[top_k:]] = -np.inf
        if top_p < 1.0:
            p = np.exp(row - row.max())
            p /= p.sum()
            cum = 0.0
            for j, idx in enumerate(order):
                if cum >= top_p:
                    row[order[j:]] = -np.inf
                    break
                cum += p[idx]
    return out


def test_top_k_hand_computed():
    logits = jnp.array([[1.0, 3.0, 2.0, 0.0], [0.5, -1.0, 4.0, 4.5]])
    got = np.asarray(filter_logits(logits, top_k=2, top_p=1.0))
    want = np.array([[-np.inf, 3.0, 2.0, -np.inf], [-np.inf, -np.inf, 4.0, 4.5]])
    np.testing.assert_array_equal(got, want)


def test_top_p_hand_computed():
    # probs = [0.5, 0.3, 0.15, 0.05]: top_p=0.7 keeps {0.5, 0.3} (0.5 alone is < 0.7).
    probs = np.array([[0.5, 0.3, 0.15, 0.05]])
    logits = jnp.asarray(np.log(probs), jnp.float32)
    got = np.isfinite(np.asarray(filter_logits(logits, top_k=0, top_p=0.7)))
    np.testing.assert_array_equal(got, [[True, True, False, False]])
    # top_p=0.5 keeps only the first token (its mass already reaches 0.5).
    got = np.isfinite(np.asarray(filter_logits(logits, top_k=0, top_p=0.5)))
    np.testing.assert_array_equal(got, [[True, False, False, False]])
    # A tiny top_p still keeps the most likely token.
    got = np.isfinite(np.asarray(filter_logits(logits, top_k=0, top_p=1e-6)))
    np.testing.assert_array_equal(got, [[True, False, False, False]])


@pytest.mark.parametrize("top_k,top_p", [(0, 0.9), (5, 1.0), (5, 0.8), (1, 1.0), (0, 0.3)])
def test_filter_matches_numpy_reference(top_k, top_p):
    logits = np.random.default_rng(top_k).normal(size=(16, 23)).astype(np.float32) * 2
    got = np.asarray(jax.jit(filter_logits, static_argnums=(1, 2))(jnp.asarray(logits), top_k,
                                                                     top_p))
    want = _np_filter(logits, top_k, top_p)
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_allclose(got[np.isfinite(got)], want[np.isfinite(want)], rtol=1e-6)


def test_inverse_cdf_draws_match_probabilities_and_never_masked_tokens():
    """Frequencies over 2^16 draws per row match softmax(logits) (a 5-sigma binomial band), and
    a token with logit -inf (filtered out) is never drawn, including at either end of the row."""
    neg = -np.inf
    logits = np.array([[neg, 0.0, 1.0, neg, 2.0, neg],     # masked ends and middle
                       [3.0, neg, neg, neg, neg, neg],     # one token left: always it
                       [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],     # uniform
                       [neg, neg, neg, neg, neg, -40.0]], np.float32)  # only the last survives
    n = 1 << 16
    draw = jax.jit(jax.vmap(draw_inverse_cdf, in_axes=(None, 0)))
    tokens = np.asarray(draw(jnp.asarray(logits), jax.random.uniform(jax.random.key(0), (n, 4))))
    assert tokens.shape == (n, 4)
    p = np.exp(logits.astype(np.float64) - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    for r in range(4):
        freq = np.bincount(tokens[:, r], minlength=6) / n
        assert np.all(freq[p[r] == 0] == 0), (r, freq)
        band = 5 * np.sqrt(p[r] * (1 - p[r]) / n) + 1e-12
        assert np.all(np.abs(freq - p[r]) <= band), (r, freq, p[r])


@functools.lru_cache(maxsize=None)  # one model, one init and one jitted forward per module
def _tiny():
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)
    model = Decoder(cfg, 20)
    params = init_params(model, jax.random.key(0))
    return cfg, model, scale_weights(params, 8.0)


@functools.lru_cache(maxsize=None)
def _forward():
    """Full-forward logits of the tiny model, jitted once for every test that checks against
    them (shapes differ per test: one compile per shape)."""
    _, model, params = _tiny()
    return jax.jit(lambda t, m: model.apply({"params": params}, t, m, method="logits"))


def test_sampler_eos_masks_logp_and_single_compile():
    cfg, model, params = _tiny()
    traces = []
    n, eos, pad = 8, 1, 0
    sample = make_sampler(model, max_new_tokens=n, eos_id=eos, pad_id=pad, temperature=1.0,
                          on_trace=lambda: traces.append(1))
    b, p = 64, 4
    prompt = jax.random.randint(jax.random.key(3), (b, p), 2, 20)
    pmask = jnp.ones((b, p), jnp.int32).at[:5, :2].set(0)
    for i in range(3):
        ro = sample(params, prompt, pmask, jax.random.key(i))
    assert len(traces) == 1, "the sampler recompiled for an unchanged batch shape"
    tokens, logp, mask, loss_mask = map(np.asarray, ro[:4])
    np.testing.assert_array_equal(loss_mask, mask)  # one turn: every token is the policy's
    # Masks are a prefix of ones that ends at (and includes) the first EOS.
    for row_t, row_m in zip(tokens, mask):
        length = int(row_m.sum())
        np.testing.assert_array_equal(row_m, (np.arange(n) < length).astype(np.float32))
        eos_at = np.flatnonzero(row_t == eos)
        if eos_at.size:
            assert eos_at[0] == length - 1
            assert np.all(row_t[length:] == pad)
        else:
            assert length == n
    assert np.all(logp[mask == 0] == 0) and np.all(logp[mask == 1] <= 0)
    assert (mask.sum(1) < n).any(), "with this init some sequences should stop at EOS"

    # The returned log-probs are those of a full forward pass over prompt ++ response.
    full_tokens = jnp.concatenate([prompt, jnp.asarray(tokens)], 1)
    full_mask = jnp.concatenate([pmask, jnp.asarray(mask, jnp.int32)], 1)
    logits = _forward()(full_tokens, full_mask)
    ref = jax.nn.log_softmax(logits[:, p - 1:-1], -1)
    ref = np.take_along_axis(np.asarray(ref), tokens[..., None], -1)[..., 0]
    np.testing.assert_allclose(logp[mask == 1], ref[mask == 1], rtol=1e-4, atol=1e-5)


def test_greedy_is_deterministic_and_argmax():
    cfg, model, params = _tiny()
    sample = make_sampler(model, max_new_tokens=5, eos_id=1, pad_id=0, temperature=0.0)
    prompt = jax.random.randint(jax.random.key(3), (8, 4), 2, 20)
    pmask = jnp.ones((8, 4), jnp.int32)
    a = sample(params, prompt, pmask, jax.random.key(0))
    b = sample(params, prompt, pmask, jax.random.key(1))
    np.testing.assert_array_equal(np.asarray(a.tokens_B_R), np.asarray(b.tokens_B_R))
    logits = _forward()(prompt, pmask)
    np.testing.assert_array_equal(np.asarray(a.tokens_B_R)[:, 0],
                                  np.asarray(jnp.argmax(logits[:, -1], -1)))


def test_greedy_every_token_is_the_full_forward_argmax():
    """Each greedy token, the last one included (drawn after the decode loop, with no forward
    after it), is the argmax of a full forward over prompt ++ the tokens before it."""
    cfg, model, params = _tiny()
    n = 6
    sample = make_sampler(model, max_new_tokens=n, eos_id=-1, pad_id=0, temperature=0.0)
    prompt = jax.random.randint(jax.random.key(5), (8, 4), 2, 20)
    pmask = jnp.ones((8, 4), jnp.int32).at[:3, :2].set(0)
    ro = sample(params, prompt, pmask, jax.random.key(0))
    tokens = np.asarray(ro.tokens_B_R)
    assert np.all(np.asarray(ro.mask_B_R) == 1)
    full_tokens = jnp.concatenate([prompt, jnp.asarray(tokens)], 1)
    full_mask = jnp.concatenate([pmask, jnp.ones((8, n), jnp.int32)], 1)
    logits = _forward()(full_tokens, full_mask)
    np.testing.assert_array_equal(tokens, np.asarray(jnp.argmax(logits[:, 3:-1], -1)))
    assert len(np.unique(tokens)) > 2


def test_loop_stops_when_every_row_is_done():
    """With every row's first token EOS, the decode loop stops at once: the first column is
    EOS (mask 1), every later column pad (mask 0, log-prob 0), the last one included."""
    cfg, model, _ = _tiny()
    params = jax.tree.map(jnp.zeros_like, init_params(model, jax.random.key(0)))
    # All-zero weights: every logit is 0, and greedy argmax picks token 0, here the EOS.
    n, eos, pad = 5, 0, 3
    sample = make_sampler(model, max_new_tokens=n, eos_id=eos, pad_id=pad, temperature=0.0)
    prompt = jax.random.randint(jax.random.key(6), (4, 3), 2, 20)
    ro = sample(params, prompt, jnp.ones_like(prompt),
                   jax.random.key(0))
    tokens, logp, mask, loss_mask = map(np.asarray, ro[:4])
    np.testing.assert_array_equal(loss_mask, mask)  # one turn: every token is the policy's
    np.testing.assert_array_equal(tokens, np.tile([eos] + [pad] * (n - 1), (4, 1)))
    np.testing.assert_array_equal(mask, np.tile([1.0] + [0.0] * (n - 1), (4, 1)))
    np.testing.assert_allclose(logp[:, 0], -np.log(20.0), rtol=1e-5)
    assert np.all(logp[:, 1:] == 0)


def test_temperature_sampling_matches_distribution():
    """Empirical first-token frequencies over many rows match softmax(logits / T)."""
    cfg, model, params = _tiny()
    temperature, b = 0.7, 4096
    sample = make_sampler(model, max_new_tokens=1, eos_id=1, pad_id=0, temperature=temperature)
    prompt = jnp.tile(jnp.array([[5, 6, 7]]), (b, 1))
    pmask = jnp.ones_like(prompt)
    ro = sample(params, prompt, pmask, jax.random.key(0))
    logits = _forward()(prompt[:1], pmask[:1])
    probs = np.asarray(jax.nn.softmax(logits[0, -1] / temperature))
    freq = np.bincount(np.asarray(ro.tokens_B_R)[:, 0], minlength=20) / b
    # 4096 draws: a binomial std is at most 0.008; a wrong temperature shifts mass by >> 0.03.
    np.testing.assert_allclose(freq, probs, atol=0.03)


def test_a_sequences_draws_do_not_depend_on_its_batch():
    """Per-sequence streams (sampling.sequence_uniforms): 16 sequences sampled at once, as two
    chunks of 8 (their indices in the step passed along) or in reverse order give each
    sequence the same tokens, and a sequence's uniforms are (key, index, column) alone."""
    from rlvr_jax.sampling import sequence_uniforms

    _, model, params = _tiny()
    sample = make_sampler(model, max_new_tokens=8, eos_id=1, pad_id=0, temperature=1.0)
    b, p, key = 16, 4, jax.random.key(7)
    prompt = jax.random.randint(jax.random.key(3), (b, p), 2, 20)
    pmask = jnp.ones((b, p), jnp.int32)
    whole = sample(params, prompt, pmask, key, jnp.arange(b))
    halves = [sample(params, prompt[s], pmask[s], key, jnp.arange(b)[s])
              for s in (slice(0, 8), slice(8, 16))]
    rev = jnp.arange(b)[::-1]
    reverse = sample(params, prompt[rev], pmask[rev], key, rev)
    for name in ("tokens_B_R", "mask_B_R"):
        w = np.asarray(getattr(whole, name))
        np.testing.assert_array_equal(w, np.concatenate([getattr(h, name) for h in halves]))
        np.testing.assert_array_equal(w, np.asarray(getattr(reverse, name))[::-1])
    np.testing.assert_allclose(np.asarray(whole.logp_B_R), np.concatenate(
        [h.logp_B_R for h in halves]), rtol=1e-6, atol=1e-6)
    u = np.asarray(sequence_uniforms(key, jnp.array([3, 5]), 6))
    np.testing.assert_array_equal(u[1], np.asarray(sequence_uniforms(key, jnp.array([5]), 6))[0])
    np.testing.assert_array_equal(u[0, :4], np.asarray(sequence_uniforms(key, jnp.array([3]),
                                                                         4))[0])


def test_each_prompt_prefilled_once_gives_the_same_rollout_bitwise():
    """Issue 29: rows in groups of G identical prompts (the loop's P_G order) prefilled once
    per prompt (1/G of the prefill FLOPs) give the tokens of a prefill per row. Not bitwise in
    the floats: XLA:CPU rounds the prefill's matmuls over P x L rows differently from B x L
    rows (the cache and logits differ by ~1e-6, measured below), so the log-probs agree to
    1e-5 and a token could flip only where a uniform lands within ~1e-6 of a CDF boundary."""
    from rlvr_jax.sampling import prefill_groups

    _, model, params = _tiny()
    g, n = 4, 8
    prompt = jnp.repeat(jax.random.randint(jax.random.key(3), (4, 5), 2, 20), g, axis=0)
    pmask = jnp.repeat(jnp.ones((4, 5), jnp.int32).at[1, :2].set(0), g, axis=0)
    key = jax.random.key(11)
    per_row = make_sampler(model, max_new_tokens=n, eos_id=1, pad_id=0, temperature=1.0)
    grouped = make_sampler(model, max_new_tokens=n, eos_id=1, pad_id=0, temperature=1.0,
                           group_size=g)
    a, b = per_row(params, prompt, pmask, key), grouped(params, prompt, pmask, key)
    for name in ("tokens_B_R", "mask_B_R", "loss_mask_B_R"):
        np.testing.assert_array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)))
    np.testing.assert_allclose(np.asarray(a.logp_B_R), np.asarray(b.logp_B_R), atol=1e-5)
    apply = lambda method, *args: model.apply({"params": params}, *args, method=method)
    one = jax.jit(lambda t, m: prefill_groups(apply, t, m, 16, 1))(prompt, pmask)
    once = jax.jit(lambda t, m: prefill_groups(apply, t, m, 16, g))(prompt, pmask)
    gaps = [float(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max())
            for x, y in zip(jax.tree.leaves(one), jax.tree.leaves(once))]
    assert max(gaps) < 1e-5, gaps  # measured: ~1e-6 (logits, keys, values); valid bits equal


@pytest.mark.parametrize("phases", [3, 4, 16])
def test_attention_over_the_filled_slots_gives_the_same_tokens(phases):
    """Issue 29: the decode loop in phases, each step's attention reading only the cache
    prefix its phase can have filled: the tokens of the one-loop sampler, log-probs to float32
    rounding (the softmax sums over fewer masked slots), one compile; 16 phases for 11 steps
    exercises empty and one-step phases."""
    from rlvr_jax.sampling import phase_ends

    _, model, params = _tiny()
    n, b, p = 12, 8, 5
    prompt = jax.random.randint(jax.random.key(3), (b, p), 2, 20)
    pmask = jnp.ones((b, p), jnp.int32).at[1, :2].set(0)
    key = jax.random.key(5)
    traces = []
    one = make_sampler(model, max_new_tokens=n, eos_id=-1, pad_id=0, temperature=1.0)
    phased = make_sampler(model, max_new_tokens=n, eos_id=-1, pad_id=0, temperature=1.0,
                          phases=phases, on_trace=lambda: traces.append(1))
    a, c = one(params, prompt, pmask, key), phased(params, prompt, pmask, key)
    phased(params, prompt, pmask, jax.random.key(6))
    assert len(traces) == 1
    np.testing.assert_array_equal(np.asarray(a.tokens_B_R), np.asarray(c.tokens_B_R))
    np.testing.assert_array_equal(np.asarray(a.mask_B_R), np.asarray(c.mask_B_R))
    np.testing.assert_allclose(np.asarray(a.logp_B_R), np.asarray(c.logp_B_R), atol=1e-5)
    ends = phase_ends(n - 1, phases)
    assert ends[-1] == n - 1 and ends == sorted(set(ends))


def test_the_decode_loop_reads_weights_in_the_compute_dtype(monkeypatch):
    """Issue 29: float32 params with bfloat16 compute (the 0.5B presets) are cast once per
    sampler call, so the decode loop the program hands XLA carries bfloat16 weights (every
    step reads half the bytes, converts nothing); bitwise the tokens and log-probs of casting
    at each use, which is what every use did. Checked on the jaxpr: XLA:CPU has no bfloat16
    dots and carries them upcast to float32 again (an accelerator's dots take bfloat16)."""
    from rlvr_jax import sampling

    cfg = ModelConfig(hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                      intermediate_size=128, compute_dtype="bfloat16", param_dtype="float32",
                      qkv_bias=True)
    model = Decoder(cfg, 97)
    params = init_params(model, jax.random.key(0))
    prompt = jax.random.randint(jax.random.key(1), (8, 16), 2, 90)
    mask = jnp.ones((8, 16), jnp.int32)
    make = lambda: make_sampler(model, max_new_tokens=12, eos_id=-1, pad_id=0, temperature=1.0)
    sample = make()
    cast = sample(params, prompt, mask, jax.random.key(2))
    def eqns(jaxpr):
        for e in jaxpr.eqns:
            yield e
            for sub in jax.extend.core.jaxprs_in_params(e.params):
                yield from eqns(sub)

    top = jax.make_jaxpr(sample)(params, prompt, mask, jax.random.key(2)).jaxpr
    loops = [e for e in eqns(top) if e.primitive.name == "while"]
    weights = [v.aval.dtype for e in loops for v in e.invars if v.aval.shape == (64, 128)]
    assert loops and weights and all(d == jnp.bfloat16 for d in weights)
    monkeypatch.setattr(sampling, "decode_weights", lambda p, cfg: p)  # cast at each use
    each_use = make()(params, prompt, mask, jax.random.key(2))
    for x, y in zip(cast, each_use):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("phases", [1, 4])
def test_a_decode_step_writes_one_slot_and_copies_no_whole_cache(phases):
    """Issue 29, decode traffic: in the compiled sampler's loops (XLA:CPU, float32), the only
    instructions the size of a layer's whole cache are the loop's own buffers and the new
    slot's in-place write (a dynamic-update-slice of the carried buffer); nothing converts,
    transposes, copies or rewrites a layer's cache per step. (In bfloat16 XLA:CPU, which has no
    bfloat16 arithmetic, wraps that write in float32 conversions of the cache; an
    accelerator's does not: experiments/bench/README.md.)"""
    cfg = ModelConfig(hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                      intermediate_size=128)
    model = Decoder(cfg, 97)
    params = init_params(model, jax.random.key(0))
    b, l, r = 8, 16, 24
    sample = make_sampler(model, max_new_tokens=r, eos_id=1, pad_id=0, temperature=1.0,
                          phases=phases)
    hlo = sample.lower(params, jnp.zeros((b, l), jnp.int32), jnp.ones((b, l), jnp.int32),
                       jax.random.key(0)).compile().as_text()
    comps = hlo_computations(hlo)
    whole = f"f32[{b},{l + r},2,16]"  # one layer's
    bodies = set(re.findall(r"body=%?([\w.\-]+)", hlo))
    assert bodies
    writes = 0
    for body in bodies:
        for line in comps[body]:
            if not re.match(rf"^%?[\w.\-]+ = {re.escape(whole)}", line):
                continue
            op = re.match(r"^\S+ = \S+ ([\w\-]+)\(", line)
            kind = op.group(1) if op else line.split(" = ")[1].split("(")[0].split()[-1]
            if kind in ("get-tuple-element", "parameter", "bitcast", "tuple"):
                continue
            assert kind == "fusion", line
            called = comps[re.search(r"calls=%?([\w.\-]+)", line).group(1)]
            root = [x for x in called if x.startswith("ROOT")][0]
            assert "dynamic-update-slice(" in root, root  # the one slot, in place
            operand = re.search(r"dynamic-update-slice\(%?([\w.\-]+)", root).group(1)
            assert any(x.startswith(f"%{operand} = ") and "parameter(" in x
                       for x in called), root
            writes += 1
    assert writes == 2 * 3 * phases  # keys and values of 3 layers, one write per loop
