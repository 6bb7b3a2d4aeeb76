"""The update's packing (rlvr_jax/packing.py): every real token lands once, each group's
prompt head once per row that holds its responses, each response slot's predictor is the slot
before its token, and the forward over packed rows gives each response token the hidden state
its padded row gives it."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax import packing
from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.models.rope import positions_from_mask
from tests.helpers import scale_weights


def _rows(g=4, p=3, l=6, r=7, seed=0, vocab=40):
    """Groups of g rows sharing a left-padded prompt ++ right-padded responses of long-tailed
    lengths: one empty response, a masked hole inside a response, a group whose prompt is a
    single token (no head)."""
    rng = np.random.default_rng(seed)
    b = g * p
    tokens = rng.integers(3, vocab, (b, l + r)).astype(np.int32)
    tokens[:, :l] = np.repeat(tokens[::g, :l], g, 0)
    plen = np.repeat(rng.integers(2, l + 1, p), g)
    plen[-g:] = 1
    rlen = np.minimum(rng.geometric(0.3, b), r)
    rlen[1], rlen[4] = 0, 4
    mask = (np.arange(l)[None] >= l - plen[:, None]).astype(np.int32)
    mask = np.concatenate([mask, (np.arange(r)[None] < rlen[:, None]).astype(np.int32)], 1)
    mask[4, l + 1] = 0
    return tokens, mask, l


def _check_plan(tokens, mask, l, g, c, plan_fn=packing.plan):
    b, t = tokens.shape
    plan = jax.tree.map(np.asarray, plan_fn(jnp.asarray(mask), l, g, c))
    src, unit, seg = plan.source_S, plan.unit_S, plan.segment_S
    first, n = map(np.asarray, packing.spans(jnp.asarray(mask), l))
    # Each response's slots L-1 .. L-1+n exactly once, in order, in segment b + 1 of one unit.
    for i in range(b):
        at = np.nonzero(seg == i + 1)[0]
        assert len(at) == (n[i] + 1 if n[i] else 0)
        np.testing.assert_array_equal(src[at], i * t + l - 1 + np.arange(len(at)))
        assert len(np.unique(unit[at])) <= 1 and (np.diff(at) == 1).all()
        if n[i]:  # the predictors: the slot before each response token, in that segment
            pred = plan.predictor_B_R[i, :n[i]]
            np.testing.assert_array_equal(src[pred + 1], i * t + l + np.arange(n[i]))
            assert (plan.predictor_B_R[i, n[i]:] == -1).all()
        else:
            assert (plan.predictor_B_R[i] == -1).all()
    # Each unit: its group's prompt head (the real prompt slots but the last) once, first.
    for u in np.unique(unit[unit > 0]):
        at = np.nonzero(unit == u)[0]
        head = at[seg[at] == 0]
        rows = {int(s) // t for s in src[at[seg[at] > 0]]}
        q = min(rows) // g
        assert {r_ // g for r_ in rows} == {q}  # one group per unit
        np.testing.assert_array_equal(src[head], q * g * t + np.arange(first[q * g], l - 1))
        assert len(head) == 0 or head.max() < at[seg[at] > 0].min()
        assert len({int(s) // c for s in at}) == 1  # one packed row
    # No response slot copied twice; a head is copied once per row its group is in.
    assert len(np.unique(src[seg > 0])) == (seg > 0).sum()
    real = (mask[:, l:] > 0).sum()
    assert (seg > 0).sum() >= real
    rows_used = int(plan.rows_used)
    assert (src.reshape(b, c)[rows_used:] == -1).all() and (src.reshape(b, c)[:rows_used]
                                                          >= 0).any(1).all()
    return plan


def test_the_plan_places_each_response_once_after_its_groups_prompt_head():
    tokens, mask, l = _rows()
    for g, c in ((4, 13), (4, 30), (1, 13), (2, 20)):
        _check_plan(tokens, mask, l, g, c)
    plan = _check_plan(tokens, mask, l, 4, 30)
    assert int(plan.rows_used) < 12  # fewer rows than sequences: the padding went


PLAN = jax.jit(packing.plan, static_argnums=(1, 2, 3))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([0, 4]), st.integers(0, 10_000))
def test_plan_fuzz(g, extra, seed):
    """Any masks (holes anywhere in responses, empty rows, prompts of any length), rows of T
    slots or more: the plan's invariants hold and B rows always suffice (shapes fixed, so
    the jitted plan compiles once per group size and row size)."""
    rng = np.random.default_rng(seed)
    b, l, r = 8, 5, 6
    p, t = b // g, l + r
    mask = np.zeros((b, t), np.int32)
    plen = np.repeat(rng.integers(0, l + 1, p), g)
    mask[:, :l] = np.arange(l)[None] >= l - plen[:, None]
    mask[:, l:] = rng.random((b, r)) < rng.random()
    tokens = rng.integers(1, 50, (b, t)).astype(np.int32)
    _check_plan(tokens, mask, l, g, t + extra, PLAN)


def test_forward_over_packed_rows_gives_each_response_its_hidden_state():
    """Decoder.forward_packed over the plan's microbatches, gathered at the predictors,
    equals the padded forward at every slot that predicts a response token (float32; the
    weights scaled so a wrong position or a leak between segments differs by O(1)); without
    the units and segments the packed responses would see each other."""
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=64)
    model = Decoder(cfg, 40)
    params = scale_weights(init_params(model, jax.random.key(0)), 3.0)
    tokens, mask, l = _rows()
    b, t = tokens.shape
    c, k = 20, 2
    plan = packing.plan(jnp.asarray(mask), l, 4, c)
    positions = positions_from_mask(jnp.asarray(mask) > 0)
    padded = np.asarray(model.apply({"params": params}, tokens, mask,
                                    method="forward"))[:, l - 1:-1]
    forward = jax.jit(lambda *a: model.apply({"params": params}, *a,
                                            method="forward_packed"))
    got, leaked = np.zeros_like(padded), np.zeros_like(padded)
    for j in range(b // k):
        m = packing.micro(plan, j, k, c, jnp.asarray(tokens), jnp.asarray(mask), positions)
        got += np.asarray(packing.gather(forward(*m[:5]), m.predictor_B_R))
        one = jnp.where(m.unit_K_C > 0, 1, 0)
        h = forward(m.tokens_K_C, m.valid_K_C, m.positions_K_C, one, jnp.zeros_like(one))
        leaked += np.asarray(packing.gather(h, m.predictor_B_R))
    real = np.asarray(plan.predictor_B_R) >= 0
    np.testing.assert_allclose(got[real], padded[real], rtol=1e-5, atol=1e-5)
    assert float(np.std(padded[real])) > 0.5
    assert np.abs(leaked[real] - padded[real]).max() > 1e-2
