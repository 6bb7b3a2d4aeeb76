"""What crosses a stage boundary. Shape suffixes: B sequences, P prompt slots, N response slots,
T = P + N, V vocabulary; in the loop B = prompts x samples_per_prompt (P_G)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


class Status(enum.IntEnum):
    """Outcome of verifying one completion. Integer values are stable: they go into arrays."""

    PASS = 0
    """The answer was checked and is correct."""
    WRONG = 1
    """The answer was extracted and checked, and it is not correct."""
    UNPARSEABLE = 2
    """No answer could be extracted from the completion (bad format, truncated)."""
    SYNTAX_ERROR = 3
    """The candidate program does not parse."""
    RUNTIME_ERROR = 4
    """The candidate program raised (or exited non-zero) before producing its outputs."""
    TIMEOUT = 5
    """The check ran past its deadline and was killed."""
    MEMORY_LIMIT = 6
    """The candidate exceeded its memory limit."""
    OUTPUT_LIMIT = 7
    """The candidate wrote more output than allowed."""
    SANDBOX_ERROR = 8
    """The verifier itself failed (worker died, sandbox did not start): an infrastructure
    failure, never a verdict on the answer. Such samples are masked out of the loss."""


@dataclass(frozen=True)
class Verdict:
    status: Status
    detail: str = ""  # human-readable reason, e.g. "expected 12, got 13"
    latency_s: float = 0.0
    fraction: float = -1.0  # share of test cases passed (code); -1: not applicable


class Rollout(NamedTuple):
    """What the sampler returns (device arrays)."""

    tokens_B_N: Any  # int32 response tokens; pad after EOS
    logp_B_N: Any  # float32 log-prob of each sampled token under softmax(logits / temperature)
    mask_B_N: Any  # float32 1 for generated tokens up to and including EOS, else 0


class TrainBatch(NamedTuple):
    """One policy-gradient batch. Prompts are left-padded to P, responses right-padded to N."""

    tokens_B_T: Any  # int32 prompt ++ response
    input_mask_B_T: Any  # float32 1 for real (non-pad) tokens; attention keys and positions
    response_mask_B_N: Any  # float32 1 for response tokens that enter the loss
    old_logp_B_N: Any  # float32 sampler log-probs (the behaviour policy)
    advantages_B_N: Any  # float32 per token: an outcome advantage broadcast, or GAE
    returns_B_N: Any = None  # float32 value targets (PPO only)
    old_values_B_N: Any = None  # float32 critic values at sampling time (PPO only)


class SFTBatch(NamedTuple):
    """Demonstrations for the supervised warm start, laid out like TrainBatch."""

    tokens_B_T: Any
    input_mask_B_T: Any
    response_mask_B_N: Any


class TrainState(NamedTuple):
    step: Any  # int32 scalar: optimizer updates done
    params: Any
    opt_state: Any


class LoopState(NamedTuple):
    """Host-side loop position, checkpointed with the train state for exact resume."""

    step: int  # RL steps completed
    problems_consumed: int  # position in the training problem stream
    rng_key: np.ndarray  # uint32 key data of the run's base PRNG key
    kl_coef: float = 0.0  # current KL coefficient (moves under the adaptive controller)
    carry: Any = None  # dynamic sampling: informative groups kept for the next step (Groups)
