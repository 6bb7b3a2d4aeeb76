"""Packing rows without padding (rlvr_jax/packing.py): every real token lands once, in its
own segment, and the model's forward over packed rows gives each sequence the hidden states
of its own padded row."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr_jax import packing
from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.models.rope import positions_from_mask
from tests.helpers import scale_weights


def _rows(b=10, l=6, r=7, seed=0, vocab=40):
    """Left-padded prompts ++ right-padded responses with long-tailed lengths, one empty
    response, one row with nothing real at all, and a masked hole inside a response."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, vocab, (b, l + r)).astype(np.int32)
    plen = rng.integers(1, l + 1, b)
    rlen = np.minimum(rng.geometric(0.3, b), r)
    rlen[1], rlen[4] = 0, 4
    mask = ((np.arange(l)[None] >= l - plen[:, None]).astype(np.int32))
    mask = np.concatenate([mask, (np.arange(r)[None] < rlen[:, None]).astype(np.int32)], 1)
    mask[3] = 0
    mask[4, l + 1] = 0
    return tokens, mask


def test_pack_places_every_real_token_once_in_its_own_segment():
    tokens, mask = _rows()
    b, t = tokens.shape
    packed = packing.pack(tokens, mask, capacity=t, rows=b, pad_id=0)
    idx = packing.unpack_index(packed, t)
    first, length = packing.spans(mask)
    assert packed.row_B[3] == -1 and (idx[3] == -1).all()  # nothing real: not packed
    flat_tokens, flat_mask = packed.tokens_K_C.reshape(-1), packed.mask_K_C.reshape(-1)
    flat_seg = packed.segment_K_C.reshape(-1)
    for i in range(b):
        inside = idx[i] >= 0
        assert inside.sum() == length[i]
        np.testing.assert_array_equal(flat_tokens[idx[i][inside]], tokens[i][inside])
        np.testing.assert_array_equal(flat_mask[idx[i][inside]], mask[i][inside])
        assert (flat_seg[idx[i][inside]] == i + 1).all()
        assert (mask[i][~inside] == 0).all()  # nothing real is left out
    used = idx[idx >= 0]
    assert len(np.unique(used)) == len(used) == int(length.sum())  # no slot shared
    assert (flat_seg[flat_mask > 0] > 0).all() and (flat_mask[flat_seg == 0] == 0).all()
    assert packed.rows_used < b  # the padding went: fewer rows than sequences
    assert packed.rows_used * t >= length.sum()


def test_pack_refuses_what_does_not_fit():
    tokens, mask = _rows()
    with pytest.raises(ValueError, match="exceeds"):
        packing.pack(tokens, mask, capacity=3, rows=10)
    with pytest.raises(ValueError, match="do not fit"):
        packing.pack(tokens, mask, capacity=tokens.shape[1], rows=1)


def test_positions_restart_at_each_segment():
    """Hand-computed: two sequences in a row (the second with a masked hole), then empty
    slots."""
    mask = np.array([[1, 1, 1, 1, 0, 1, 0, 0]])
    segment = np.array([[1, 1, 2, 2, 2, 2, 0, 0]])
    np.testing.assert_array_equal(np.asarray(positions_from_mask(mask, segment)),
                                  [[0, 1, 0, 1, 1, 2, 0, 0]])


def test_forward_over_packed_rows_gives_each_rows_hidden_states():
    """Decoder.forward over the packed rows (attention within a segment, positions
    restarting), gathered back with unpack_index, equals the forward over the padded rows
    at every real slot (float32; the weights scaled so a wrong position or a leak between
    segments differs by O(1))."""
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=64)
    model = Decoder(cfg, 40)
    params = scale_weights(init_params(model, jax.random.key(0)), 3.0)
    tokens, mask = _rows()
    b, t = tokens.shape
    packed = packing.pack(tokens, mask, capacity=t, rows=b)
    apply = jax.jit(lambda *a: model.apply({"params": params}, *a, method="forward"))
    rows = np.asarray(apply(tokens, mask))
    flat = np.asarray(apply(packed.tokens_K_C, packed.mask_K_C,
                            packed.segment_K_C)).reshape(b * t, -1)
    idx = packing.unpack_index(packed, t)
    real = mask > 0
    np.testing.assert_allclose(flat[idx[real]], rows[real], rtol=1e-5, atol=1e-5)
    assert float(np.std(rows[real])) > 0.5
    # Without the segments the packed sequences would see each other: a different answer.
    leaked = np.asarray(apply(packed.tokens_K_C, packed.mask_K_C)).reshape(b * t, -1)
    assert np.abs(leaked[idx[real]] - rows[real]).max() > 1e-2


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 9), st.integers(0, 10_000))
def test_pack_fuzz(b, t, seed):
    """Any masks (holes anywhere, empty rows): each real token at one packed slot of its own
    segment, nothing over capacity, and B rows of T slots always suffice."""
    rng = np.random.default_rng(seed)
    mask = (rng.random((b, t)) < rng.random()).astype(np.int32)
    tokens = rng.integers(1, 50, (b, t)).astype(np.int32)
    packed = packing.pack(tokens, mask, capacity=t, rows=b)
    idx = packing.unpack_index(packed, t)
    used = idx[idx >= 0]
    assert len(np.unique(used)) == len(used)
    real = mask > 0
    assert (idx[real] >= 0).all()
    np.testing.assert_array_equal(packed.tokens_K_C.reshape(-1)[idx[real]], tokens[real])
    seg = packed.segment_K_C.reshape(-1)[idx]
    rows_of = np.broadcast_to(np.arange(b)[:, None] + 1, (b, t))
    assert (seg[idx >= 0] == rows_of[idx >= 0]).all()
