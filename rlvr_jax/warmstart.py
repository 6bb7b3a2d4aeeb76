"""Supervised warm start on imperfect demonstrations.

Each demonstration is the task's prompt and an answer that is wrong with probability
`wrong_fraction` (off by 1..max_offset). A policy that imitates them perfectly answers correctly
only ~(1 - wrong_fraction) of the time when sampled: the ceiling of imitation, which the RL phase
is there to break using the verifier.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from rlvr_jax import batching
from rlvr_jax.tasks.arithmetic import ArithmeticTask
from rlvr_jax.types import SFTBatch


def demonstration_batch(task: ArithmeticTask, tokenizer, *, seed: int, batch_index: int,
                        count: int, wrong_fraction: float, max_offset: int, prompt_len: int,
                        max_new_tokens: int) -> SFTBatch:
    """Batch `batch_index` of demonstrations (a pure function of its arguments)."""
    # A stream distinct from the RL problem stream (whose rng is [seed, step]).
    rng = np.random.default_rng([seed, batch_index, 0xD3])
    problems = task.train_batch(seed + 0x5F7, batch_index, count)
    wrong = rng.random(count) < wrong_fraction
    responses = [task.demonstration(p, w, rng, max_offset) for p, w in zip(problems, wrong)]
    prompt, prompt_mask = batching.encode_prompts(tokenizer, [task.prompt(p) for p in problems],
                                                  prompt_len)
    response, response_mask = batching.encode_responses(tokenizer, responses, max_new_tokens)
    return batching.sft_batch(prompt, prompt_mask, response, response_mask)


def run_warmup(sft_step: Callable, state, make_batch: Callable[[int], SFTBatch], steps: int,
               put: Callable, on_log: Callable[[int, dict], None], log_every: int = 100):
    """`steps` supervised updates; `make_batch(i)` builds batch i on the host."""
    for i in range(steps):
        state, metrics = sft_step(state, put(make_batch(i)))
        if (i + 1) % log_every == 0 or i + 1 == steps:
            on_log(i + 1, metrics)
    return state
