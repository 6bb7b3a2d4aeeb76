"""The character tokenizer through transformers, and prompt / response encoding."""

import pytest

from rlvr_jax import batching
from rlvr_jax.tokenizer import EOS, PAD, build_char_tokenizer, load_tokenizer, save_char_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    save_char_tokenizer(str(d))
    return load_tokenizer(str(d))


def test_transformers_ids_equal_raw_tokenizer_ids(tok):
    raw = build_char_tokenizer()
    for text in ["07+88=", "Q: 12 * 3 =\n", "-105", "a b\tc"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == raw.encode(text).ids
        assert len(ids) == len(text.replace("\t", "?")) or "\t" in text  # one token per char
        if "\t" not in text:
            assert tok.decode(ids) == text
    assert tok.pad_token == PAD and tok.eos_token == EOS and tok.pad_token_id == 0


def test_prompt_and_response_encoding(tok):
    tokens, mask = batching.encode_prompts(tok, ["1+2=", "10+20="], prompt_len=6)
    assert mask.tolist() == [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]
    assert tokens[0, :2].tolist() == [tok.pad_token_id] * 2
    resp, rmask = batching.encode_responses(tok, ["3", "30"], max_new_tokens=4)
    assert rmask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0]]
    assert resp[0, 1] == tok.eos_token_id
    assert batching.decode_responses(tok, resp, rmask) == ["3", "30"]
    with pytest.raises(ValueError, match="prompt budget"):
        batching.encode_prompts(tok, ["1234567="], prompt_len=6)
    with pytest.raises(ValueError, match="sampling.max_new_tokens"):
        batching.encode_responses(tok, ["1234"], max_new_tokens=4)
