"""Host-side batching: truncation detection."""

import numpy as np

from rlvr_jax import batching


def test_truncated_means_full_budget_without_eos():
    eos = 1
    tokens = np.array([[5, 6, 1], [5, 6, 7], [5, 1, 0], [1, 0, 0]])
    mask = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0]], np.float32)
    np.testing.assert_array_equal(batching.truncated(tokens, mask, eos), [False, True, False, False])
