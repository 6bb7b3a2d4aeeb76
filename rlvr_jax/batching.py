"""Host-side text <-> array conversion with fixed shapes: prompts left-padded to P slots,
responses right-padded to N slots, so jitted code sees one shape per run."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rlvr_jax.types import Rollout, SFTBatch, TrainBatch


def encode_prompts(tokenizer, texts: Sequence[str], prompt_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded int32 tokens_B_P and int32 mask_B_P. A prompt longer than P is an error."""
    tokens = np.full((len(texts), prompt_len), tokenizer.pad_token_id, np.int32)
    mask = np.zeros((len(texts), prompt_len), np.int32)
    for i, text in enumerate(texts):
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) > prompt_len:
            raise ValueError(f"prompt of {len(ids)} tokens exceeds the {prompt_len}-token prompt "
                             f"budget: {text[:60]!r}")
        if ids:
            tokens[i, prompt_len - len(ids):] = ids
            mask[i, prompt_len - len(ids):] = 1
    return tokens, mask


def encode_responses(tokenizer, texts: Sequence[str], max_new_tokens: int,
                     key: str = "sampling.max_new_tokens") -> tuple[np.ndarray, np.ndarray]:
    """Right-padded response tokens (EOS appended) and their float32 mask."""
    tokens = np.full((len(texts), max_new_tokens), tokenizer.pad_token_id, np.int32)
    mask = np.zeros((len(texts), max_new_tokens), np.float32)
    for i, text in enumerate(texts):
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        if len(ids) > max_new_tokens:
            raise ValueError(f"config key '{key}'={max_new_tokens} is too small for the "
                             f"response {text!r} ({len(ids)} tokens with EOS)")
        tokens[i, : len(ids)] = ids
        mask[i, : len(ids)] = 1.0
    return tokens, mask


def decode_responses(tokenizer, tokens_B_N: np.ndarray, mask_B_N: np.ndarray) -> list[str]:
    """Text of each response without EOS/pad (a response cut at N has no EOS)."""
    out = []
    for toks, m in zip(np.asarray(tokens_B_N), np.asarray(mask_B_N)):
        ids = [t for t, keep in zip(toks.tolist(), m.tolist()) if keep and t != tokenizer.eos_token_id]
        out.append(tokenizer.decode(ids, skip_special_tokens=True))
    return out


def sft_batch(prompt_B_P: np.ndarray, prompt_mask_B_P: np.ndarray, response_B_N: np.ndarray,
              response_mask_B_N: np.ndarray) -> SFTBatch:
    tokens = np.concatenate([prompt_B_P, response_B_N], axis=1)
    input_mask = np.concatenate([prompt_mask_B_P, response_mask_B_N.astype(np.int32)], axis=1)
    return SFTBatch(tokens, input_mask, response_mask_B_N)


def train_batch(prompt_B_P, prompt_mask_B_P, rollout: Rollout, advantages_B) -> TrainBatch:
    """Concatenate prompts and sampled responses (device arrays stay on device)."""
    import jax.numpy as jnp  # batching is otherwise numpy-only

    tokens = jnp.concatenate([prompt_B_P, rollout.tokens_B_N], axis=1)
    input_mask = jnp.concatenate([prompt_mask_B_P, rollout.mask_B_N.astype(jnp.int32)], axis=1)
    return TrainBatch(tokens, input_mask, rollout.mask_B_N, rollout.logp_B_N,
                      jnp.asarray(advantages_B, jnp.float32))
