"""Tokenizers. Procedural tasks use a character-level tokenizer built with the `tokenizers`
library, saved into the run directory and loaded back through transformers, so the code that
later loads a real checkpoint's tokenizer (`AutoTokenizer`) is the same from there on.

Why `PreTrainedTokenizerFast` and not `AutoTokenizer` for ours: a custom tokenizer.json next to
a Qwen2 config.json is loaded by AutoTokenizer as Qwen2Tokenizer, which re-splits digits. Our
directory holds no config.json, and we load the fast class explicitly anyway.
"""

from __future__ import annotations

import os
import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHARSET = string.digits + string.ascii_letters + string.punctuation + " \n"


def build_char_tokenizer(charset: str = CHARSET) -> Tokenizer:
    """One token per character of `charset`, ids 0..2 reserved for <pad>, <eos>, <unk>."""
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for ch in dict.fromkeys(charset):  # ordered, de-duplicated
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # join characters back without spaces
    return tok


def save_char_tokenizer(directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tokenizer.json")
    build_char_tokenizer().save(path)
    return path


def load_tokenizer(directory: str) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved by `save_char_tokenizer` through transformers."""
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no tokenizer.json in {directory!r}")
    return PreTrainedTokenizerFast(tokenizer_file=path, pad_token=PAD, eos_token=EOS, unk_token=UNK)


def load_pretrained_tokenizer(directory: str) -> PreTrainedTokenizerFast:
    """A Hugging Face model directory's own tokenizer (tokenizer.json, tokenizer_config.json
    with its special tokens and chat template), through the generic fast class: AutoTokenizer
    may pick a model-specific class that re-tokenizes differently (see NOTES-env). A tokenizer
    without a pad token pads with EOS (pads are masked everywhere)."""
    if not os.path.isfile(os.path.join(directory, "tokenizer.json")):
        raise FileNotFoundError(f"no tokenizer.json in {directory!r} (model.path must be a "
                                "Hugging Face directory with its tokenizer)")
    tok = PreTrainedTokenizerFast.from_pretrained(directory)
    if tok.eos_token_id is None:
        raise ValueError(f"{directory}: the tokenizer defines no eos_token")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok
