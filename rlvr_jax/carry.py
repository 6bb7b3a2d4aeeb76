"""Episodes carried across updates (issue 40; `rollout.stream.carry_batches` W >= 1, with
`rollout.off_policy_steps` d >= 1): the streamed rows are kept from one step to the next, so a
step does not wait for rows to drain. While batch j's last episodes run, the rows they free
take episodes of batches j+1 .. j+W; those go on in the next steps under the next params.

    begin(j, theta_v, v):  batches up to j+W queued; stream until batch j's episodes have all
                           ended (its record); the rest stay in their rows, or wait on calls
                           that run through the update

With rollouts.take's schedule batch j begins with theta_{j-d}, so its tokens are sampled under
theta_{j-d-W} .. theta_{j-d}: each token's version is in the record (`Rollout.version_B_R`),
its behaviour log-prob is the one it was sampled with, and `algo.loss.correction` weighs each
token; the lag of a token (the update's step minus its version) is at most d + W, logged as
`rollout/version_lag_max` / `_mean` (rollouts.version_lag).

A carried episode goes on under new params with its history prefilled again under them
(`rollout.stream.carry_cache=recompute`: its cache is what the new params compute), or with its
cache from the old params (`keep`: no recompute; the cache mixes versions).

Exact resume: a checkpoint holds what is in flight (`state`): the batches sampled and not yet
trained on (their records; their verification is run again on resume) and the stream's
started episodes (streaming.Stream.snapshot: records, calls in flight; their sessions are opened
again and their answered calls replayed). With `recompute` a resumed run equals the
uninterrupted one bit for bit (the rows are rebuilt as the uninterrupted run rebuilds them
at each change of params); with `keep` the checkpoint's step recomputes its rows in both.
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
