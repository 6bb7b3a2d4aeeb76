"""A batch of responses for the loop and evaluation, whatever makes them: one sampler call
(single turn), or episodes of turns with an environment (episodes.py). The builder picks
one (build.generators); the stages call `generate(params, prompt_B_L, pmask_B_L, key,
contexts, rows_B)` (contexts: each row's task context for tools, unused by one turn; rows_B:
the sequences' indices in the step, which fix their random streams) and never ask which.
Each returns one record, `types.Generated`.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Optional, Sequence

import numpy as np

from rlvr_jax import batching, carry, distributed, episodes, streaming
from rlvr_jax.types import Generated, Rollout, Verdict


def single_turn(sample: Callable, tokenizer, put: Callable,
                every_row: bool = False) -> Callable[..., Generated]:
    """`every_row`: texts of every process's rows (evaluation reads all answers), else of
    this process's own (what it verifies)."""
    def generate(params, prompt_B_L, pmask_B_L, key, contexts=None, rows_B=None) -> Generated:
        rows_B = np.arange(len(prompt_B_L)) if rows_B is None else rows_B
        part = sample(params, put(prompt_B_L), put(pmask_B_L), key,
                      put(np.asarray(rows_B, np.int32)))
        host = Rollout(*distributed.to_host(part)).host()
        n = len(host.tokens_B_R)
        mine = slice(0, n) if every_row else distributed.my_rows(n)
        texts = batching.decode_responses(tokenizer, host.tokens_B_R[mine], host.mask_B_R[mine])
        return Generated(host, texts, [None] * len(texts), {}, part)

    return generate


def continuous(sampler, tokenizer, put: Callable) -> Callable[..., Generated]:
    """One-turn responses by continuous batching (rlvr_jax/continuous.py): any number of rows
    in one call (`any_batch`: evaluation hands it every sequence at once); every row's texts."""
    def generate(params, prompt_B_L, pmask_B_L, key, contexts=None, rows_B=None) -> Generated:
        rows_B = np.arange(len(prompt_B_L)) if rows_B is None else rows_B
        host, stats = sampler.run(params, np.asarray(prompt_B_L), np.asarray(pmask_B_L), key,
                                  np.asarray(rows_B), put)
        texts = batching.decode_responses(tokenizer, host.tokens_B_R, host.mask_B_R)
        return Generated(host, texts, [None] * len(texts),
                         {f"continuous/{k}": v for k, v in stats.items()}, None)

    generate.any_batch = True
    return generate


def multi_turn(sampler, env, tokenizer, glue: episodes.Glue, max_turns: int, put: Callable,
               every_row: bool = False) -> Callable[..., Generated]:
    """Episodes (episodes.py): every row's final texts and environment verdicts on every
    process; the stage verifies this process's rows of them."""
    def generate(params, prompt_B_L, pmask_B_L, key, contexts=None, rows_B=None) -> Generated:
        return own_rows(episodes.run(sampler, env, tokenizer, glue, params, prompt_B_L,
                                     pmask_B_L, key, max_turns=max_turns, put=put,
                                     contexts=contexts, rows_B=rows_B), every_row)

    return generate


def own_rows(made: Generated, every_row: bool) -> Generated:
    """An episodes record (every row's texts and environment verdicts) with this process's
    rows' texts and verdicts (what its stage verifies), or every row's (`every_row`)."""
    n = len(made.texts)
    mine = slice(0, n) if every_row else distributed.my_rows(n)
    return made._replace(texts=made.texts[mine], verdicts=made.verdicts[mine])


def streamed(sampler, env, tokenizer, glue: episodes.Glue, max_turns: int, put: Callable,
             schedule: streaming.Schedule, group_size: int = 1, carry_batches: int = 0,
             every_row: bool = False) -> Callable[..., Generated]:
    """Episodes streamed through decode rows (streaming.py): the same record as
    `multi_turn`'s. `carry_batches` W > 0: one stream kept across steps (carry.py)."""
    if carry_batches:
        return carry.Carried(streaming.Stream(
            sampler, env, tokenizer, glue, max_turns=max_turns, put=put, schedule=schedule,
            group_size=group_size, carry=carry_batches), carry_batches,
            partial(own_rows, every_row=every_row))

    def generate(params, prompt_B_L, pmask_B_L, key, contexts=None, rows_B=None) -> Generated:
        return own_rows(streaming.run(
            sampler, env, tokenizer, glue, params, prompt_B_L, pmask_B_L, key,
            max_turns=max_turns, put=put, schedule=schedule, group_size=group_size,
            contexts=contexts, rows_N=rows_B), every_row)

    return generate


def overrule(verdicts: Sequence[Verdict], env_verdicts: Sequence[Optional[Verdict]]
             ) -> list[Verdict]:
    """The task verifier's verdicts, each replaced by its episode's environment verdict where
    there is one: the world's final state, or SANDBOX_ERROR when the episode's sandbox
    failed (masked out of the loss, never a wrong answer, whatever it answered)."""
    return [v if e is None else e for v, e in zip(verdicts, env_verdicts)]
