"""Host-side batching: truncation detection."""

import numpy as np

from rlvr_jax import batching


def test_truncated_means_full_budget_without_eos():
    eos = 1
    tokens = np.array([[5, 6, 1], [5, 6, 7], [5, 1, 0], [1, 0, 0]])
    mask = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0]], np.float32)
    np.testing.assert_array_equal(batching.truncated(tokens, mask, eos), [False, True, False, False])


def test_pair_batch_lays_out_both_sides_like_a_train_batch(tmp_path):
    from rlvr_jax.tokenizer import load_tokenizer, save_char_tokenizer

    save_char_tokenizer(str(tmp_path))
    tok = load_tokenizer(str(tmp_path))
    b = batching.pair_batch(tok, ["1+2=", "10+5="], ["3", "15"], ["4", "150"], prompt_len=6,
                            max_new_tokens=4)
    assert b.chosen_B_T.shape == b.rejected_B_T.shape == (2, 10)
    np.testing.assert_array_equal(b.chosen_mask_B_T[:, :6], b.rejected_mask_B_T[:, :6])
    np.testing.assert_array_equal(b.chosen_response_mask_B_R.sum(1), [2, 3])  # + EOS
    np.testing.assert_array_equal(b.rejected_response_mask_B_R.sum(1), [2, 4])
    assert tok.decode(b.rejected_B_T[1][b.rejected_mask_B_T[1].astype(bool)].tolist(),
                      skip_special_tokens=True) == "10+5=150"
    assert b.ref_logp_chosen_B is None
