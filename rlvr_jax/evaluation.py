"""Held-out accuracy of a policy: greedy and sampled, in fixed-shape batches.

The last batch is padded by repeating its first prompt, so evaluation compiles the sampler once
per mode; padded rows are dropped before scoring.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np

from rlvr_jax import batching, rewards
from rlvr_jax.tasks.arithmetic import ArithmeticTask, Problem, verify_all
from rlvr_jax.types import Status


def heldout_accuracy(sample: Callable, cache, params, task: ArithmeticTask, tokenizer,
                     problems: Sequence[Problem], *, samples_per_problem: int, prompt_len: int,
                     batch_size: int, key: jax.Array, put: Callable) -> tuple[object, dict]:
    """Returns (cache, {"accuracy": pass fraction over all samples, "status/...": counts}).

    `sample` is a jitted sampler (greedy or not) whose cache has `batch_size` rows; `put` places
    a host array on the mesh with the batch sharding."""
    jobs = [p for p in problems for _ in range(samples_per_problem)]
    verdicts = []
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start: start + batch_size]
        padded = chunk + [chunk[0]] * (batch_size - len(chunk))
        prompt, mask = batching.encode_prompts(tokenizer, [task.prompt(p) for p in padded],
                                               prompt_len)
        cache, rollout = sample(params, cache, put(prompt), put(mask),
                                jax.random.fold_in(key, start))
        tokens, resp_mask = jax.device_get((rollout.tokens_B_N, rollout.mask_B_N))
        texts = batching.decode_responses(tokenizer, tokens[: len(chunk)], resp_mask[: len(chunk)])
        verdicts += verify_all(task, chunk, texts)
    accuracy = float(np.mean([v.status == Status.PASS for v in verdicts]))
    return cache, {"accuracy": accuracy, **rewards.status_counts(verdicts)}
