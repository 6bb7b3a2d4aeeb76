"""Episodes carried across updates (issue 40; `rollout.stream.carry_batches` W >= 1, with
`rollout.off_policy_steps` d >= 1): a step does not wait for its batch's last episodes with
its rows idle. The stream is kept from one step to the next, and the rows a batch's episodes
leave (their turns ended on calls, or they ended) take the first turns of the next W
batches' episodes, whose calls then run through the update. What a run takes is fixed by
turn levels, never by when calls come back:

    run j (theta_v):  every turn of batch j's episodes, and of batch j + w (1 <= w <= W) the
                      turns up to W + 1 - w; it ends when none of these is left (so batch
                      j + W's first turns, j + W - 1's second turns, ..., all taken)

So every token's version is a function of its batch and turn: tokens of batch j's turn t
are theta_{j-W+t-1}'s (theta_j's from turn W + 1 on), whatever the latencies, the row
count or the schedule, and late calls can be deferred (streaming.py) with carried episodes
too. At the end of a run every carried episode sits at a turn boundary, out of its row,
waiting for its call or for its turn; it resumes under the next params with its history
prefilled under them (`Stream._resume`: the recompute, logged), its first turn there
recorded under the new version.

With rollouts.take's schedule batch j begins with theta_{j-d}, so its tokens are sampled under
theta_{j-d-W} .. theta_{j-d}: each token's version is in the record (`Rollout.version_B_R`),
its behaviour log-prob is the one it was sampled with, and `algo.loss.correction` weighs each
token; the lag of a token (the update's step minus its version) is at most d + W, logged as
`rollout/version_lag_max` / `_mean` (rollouts.version_lag).

Exact resume: a checkpoint holds what is in flight (`state`): the batches sampled and not yet
trained on (their records; their verification is run again on resume) and the stream's
started episodes (streaming.Stream.snapshot: records, calls in flight; their sessions are
opened again and their answered calls replayed). A resumed run equals the uninterrupted one
bit for bit (tested, with another latency draw after the restore).
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from rlvr_jax import distributed, episodes, rollouts
from rlvr_jax.stream_state import verdict_json, verdict_of
from rlvr_jax.streaming import Stream
from rlvr_jax.types import Generated, Rollout


class Carried:
    """The train generator of a carried stream: `begin` says which batch and version the
    next call runs (the stages hand it the batch's prompts, queued already)."""

    def __init__(self, stream: Stream, window: int, own: Callable = lambda made: made):
        self.stream, self.window = stream, window
        self.own = own  # every row's record -> the texts and verdicts this process verifies
        self.j, self.version = 0, 0
        self.added = 0  # batches queued so far: 0 .. added-1
        self.replay: Optional[Generated] = None  # a restored batch's record, returned as is

    def __call__(self, params, prompt_B_L, pmask_B_L, key, contexts=None,
                 rows_B=None) -> Generated:
        if self.replay is not None:
            out, self.replay = self.replay, None
            return self.own(out)
        return self.own(self.stream.run(params, self.version, self.j))

    def close(self) -> None:
        self.stream.close()


def close(train: Optional[Callable]) -> None:
    """A carried stream's episodes closed (anything else: nothing to do)."""
    if isinstance(train, Carried):
        train.close()


def begin_for(train: Callable, begin: Callable, *, inputs: Callable,
              num_steps: int) -> Callable:
    """rollouts.take's `begin`: `begin` itself, or with a carried stream (`train` is
    `Carried`) one that queues the batches ahead first. `inputs(j)` -> (prompt_N_L,
    pmask_N_L, key, contexts) of batch j."""
    if not isinstance(train, Carried):
        return begin

    def carried_begin(step: int, params, version: int):
        for j in range(train.added, min(step + train.window + 1, num_steps)):
            train.stream.add(j, *inputs(j))
            train.added = j + 1
        train.j, train.version = step, version
        return begin(step, params, version)

    return carried_begin


def state(train: Callable, ahead: rollouts.Ahead, next_step: int) -> Optional[dict]:
    """What is in flight after step `next_step` - 1 (JSON), or None without a carried
    stream: the batches begun and not yet trained on, and the stream."""
    if not isinstance(train, Carried):
        return None
    made = []
    for j, future in enumerate(ahead.started, next_step):
        started = future.result()
        g = started.sampling.parts[0]
        texts, verdicts, n = g.texts, g.verdicts, len(g.rollout.tokens_B_R)
        if len(texts) < n:  # this process's rows: every row's are kept (one writer)
            texts = distributed.gather_texts(texts)
            verdicts = episodes.gather_verdicts(verdicts, distributed.my_rows(n), n)
        made.append({"j": j, "version": started.version, "texts": texts,
                     "verdicts": [verdict_json(v) for v in verdicts],
                     "stats": g.stats, "rollout": [x.tolist() for x in g.rollout]})
    return {"made": made, "added": train.added, "stream": train.stream.snapshot()}


def restore(train: Callable, saved: Optional[dict], begin: Callable, inputs: Callable,
            params) -> Optional[tuple]:
    """The checkpoint's carried state back: the batches in flight as `take`'s started
    futures (their verification submitted again), the stream rebuilt. None without one.
    `begin`: the plain one (stages.begin), given the state's `params` (unused: each
    batch's record is handed back as it was made)."""
    if not isinstance(train, Carried) or saved is None:
        return None
    made = saved["made"]
    for j in saved["stream"]["queued"]:
        train.stream.add(j, *inputs(j))  # the batches the stream had queued
    train.added = saved["added"]
    train.stream.restore(saved["stream"])
    started = []
    for m in made:
        fields = [np.asarray(x, dtype) for x, dtype in zip(m["rollout"], (
            np.int32, np.float32, np.float32, np.float32, np.float32, np.int32))]
        train.replay = Generated(Rollout(*fields), list(m["texts"]),
                                 [verdict_of(v) for v in m["verdicts"]], dict(m["stats"]))
        started.append(rollouts.Now(begin(m["j"], params, m["version"])))
    return tuple(started)
