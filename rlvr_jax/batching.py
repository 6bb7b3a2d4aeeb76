"""Host-side text <-> array conversion with fixed shapes: prompts left-padded to L slots,
responses right-padded to R slots, so jitted code sees one shape per run."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rlvr_jax.types import Groups
from rlvr_jax.types import PairBatch, SFTBatch, TrainBatch


def encode_prompts(tokenizer, texts: Sequence[str], prompt_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded int32 tokens_B_L and int32 mask_B_L. A prompt longer than L is an error."""
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


def decode_responses(tokenizer, tokens_B_R: np.ndarray, mask_B_R: np.ndarray) -> list[str]:
    """Text of each response without EOS/pad (a response cut at R has no EOS)."""
    out = []
    for toks, m in zip(np.asarray(tokens_B_R), np.asarray(mask_B_R)):
        ids = [t for t, keep in zip(toks.tolist(), m.tolist()) if keep and t != tokenizer.eos_token_id]
        out.append(tokenizer.decode(ids, skip_special_tokens=True))
    return out


def sft_batch(prompt_B_L: np.ndarray, prompt_mask_B_L: np.ndarray, response_B_R: np.ndarray,
              response_mask_B_R: np.ndarray, attention_B_R: np.ndarray | None = None) -> SFTBatch:
    """`attention_B_R` (default: the response mask) covers tokens attended to but not trained
    on, an episode's observations."""
    attention_B_R = response_mask_B_R if attention_B_R is None else attention_B_R
    tokens = np.concatenate([prompt_B_L, response_B_R], axis=1)
    input_mask = np.concatenate([prompt_mask_B_L, attention_B_R.astype(np.int32)], axis=1)
    return SFTBatch(tokens, input_mask, response_mask_B_R)


def truncated(tokens_B_R: np.ndarray, mask_B_R: np.ndarray, eos_id: int) -> np.ndarray:
    """bool [B]: the response used its whole budget without emitting EOS (cut off)."""
    n_B = mask_B_R.sum(axis=1).astype(np.int64)
    last_B = tokens_B_R[np.arange(len(n_B)), np.maximum(n_B - 1, 0)]
    return (n_B == mask_B_R.shape[1]) & (last_B != eos_id)


def groups_from_rollout(prompt_B_L, prompt_mask_B_L, tokens_B_R, logp_B_R, mask_B_R,
                        loss_mask_B_R, rewards_B, group_size: int,
                        turn_rewards_B_R=None, components_B_C=None) -> Groups:
    """Host arrays in P_G order -> Groups [B / G, G, ...] (no per-turn rewards: zeros). A
    group is G samples of one prompt: the sampler and the update compute it once per group."""
    def one_per_group(x_B_L) -> bool:
        x_P_G_L = np.asarray(x_B_L).reshape(-1, group_size, np.shape(x_B_L)[1])
        return bool((x_P_G_L == x_P_G_L[:, :1]).all())

    if not (one_per_group(prompt_B_L) and one_per_group(prompt_mask_B_L)):
        raise ValueError("rows of one group have different prompts: a group is G samples of "
                         "one prompt, in P_G order")
    if turn_rewards_B_R is None:
        turn_rewards_B_R = np.zeros(np.shape(mask_B_R), np.float32)
    g = lambda x: np.asarray(x).reshape(-1, group_size, *np.shape(x)[1:])
    return Groups(g(prompt_B_L).astype(np.int32), g(prompt_mask_B_L).astype(np.int32),
                  g(tokens_B_R).astype(np.int32), g(logp_B_R).astype(np.float32),
                  g(mask_B_R).astype(np.float32), g(loss_mask_B_R).astype(np.float32),
                  g(rewards_B).astype(np.float32), g(turn_rewards_B_R).astype(np.float32),
                  None if components_B_C is None else g(components_B_C).astype(np.float32))


def train_batch(groups: Groups, advantages_B=None) -> TrainBatch:
    """Host TrainBatch from groups: prompt ++ response, the outcome advantage of each sequence
    broadcast over its loss-masked tokens (zeros when `advantages_B` is None: PPO fills them)."""
    f = groups.flat()
    tokens = np.concatenate([f.prompt_P_G_L, f.tokens_P_G_R], axis=1)
    input_mask = np.concatenate([f.prompt_mask_P_G_L, f.mask_P_G_R.astype(np.int32)], axis=1)
    adv_B = np.zeros(len(tokens), np.float32) if advantages_B is None else advantages_B
    adv_B = np.asarray(adv_B, np.float32)
    # Per sequence [B] (broadcast over its tokens) or already per token [B, R] (GiGPO).
    adv_B_R = (adv_B if adv_B.ndim == 2 else adv_B[:, None]) * f.loss_mask_P_G_R
    return TrainBatch(tokens, input_mask, f.loss_mask_P_G_R, f.logp_P_G_R, adv_B_R)


def pair_batch(tokenizer, prompts: Sequence[str], chosen: Sequence[str],
               rejected: Sequence[str], prompt_len: int, max_new_tokens: int) -> PairBatch:
    """Host PairBatch: each side the prompt (left-padded to L) ++ its response (EOS appended,
    right-padded to R); no reference log-probs yet."""
    prompt, prompt_mask = encode_prompts(tokenizer, prompts, prompt_len)
    sides = []
    for texts in (chosen, rejected):
        tokens, mask = encode_responses(tokenizer, texts, max_new_tokens)
        sides += [np.concatenate([prompt, tokens], axis=1),
                  np.concatenate([prompt_mask, mask.astype(np.int32)], axis=1), mask]
    return PairBatch(*sides)
