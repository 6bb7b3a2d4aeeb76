"""Where each RL step's batch comes from: made at the step (synchronous), or `d =
rollout.off_policy_steps` steps ahead from a snapshot of the params, verified while the
updates in between run (asynchronous rollouts, as verl's one-step-off-policy trainer, TRL's
async GRPO or PipelineRL overlap them).

The schedule is fixed, never timing-dependent: batch k is sampled with theta_max(0, k-d), the
params before update k-d (theta_j: the params after j updates). So an async run repeats bit
for bit, run to run and across a stop and resume, and a batch is never trained on twice.

    ahead, made = take(ahead, step, state.params)   # one loop line, any d

At step k, `take`:
  1. copies theta_k (`snapshot`: the update donates the state's buffers, so the producer must
     own its params; on a split placement the copy is the transfer to the sampler's devices);
  2. starts batch k+d from that copy: prompts, the sampler (device), and the verification
     handed to the worker processes, not waited for (stages.start_sampling);
  3. finishes batch k (started d steps ago): waits for its verdicts, which ran while the
     updates in between did, and scores it (stages.finish_sampling, stages.score).
By default everything runs on the calling thread in this order, so several processes issue
their collectives in one order (a producer thread would let each process interleave the
sampler's and the update's programs differently, and deadlock). What overlaps then is what
costs time on a code task: the sandbox's verification of batch k+d (worker processes) against
update k (devices). Multi-turn episodes run their tool calls inside step 2, so with an
environment only the final verification overlaps. Where the sampler has devices of its own
(`rollout.sampler_devices`) in a one-process, one-turn run, step 2 runs on a producer thread
(`producer`; its `submit` is `take`'s `run`): batch k+d is sampled on the sampler's devices while update k runs on
the trainer's; the loop lets it finish (`settle`) before it evaluates with the same samplers.
The tokens and the schedule are the same either way (tested).

With d = 0, `take` is `start` then `finish` of batch k from the state's own params: the
synchronous loop, bitwise (no copy is made).

Exact resume: after step k the loop checkpoints `ahead.behind` (theta_{k+1-d} .. theta_k, the
params of the batches in flight) with the train state; a resumed run starts those batches
again from them, so an interrupted producer step loses nothing and the in-flight batches
need no serialising (they are regenerated exactly: the sampler is deterministic; the verdicts
are, as far as the candidates' own behaviour is). Memory: d copies of the policy's trained
params (with LoRA, of its adapters).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import numpy as np

from rlvr_jax.types import Groups


class Made(NamedTuple):
    """One step's batch, sampled, verified and scored."""

    problems: Sequence  # the step's problems (P of them; each sampled G times)
    prompt_B_L: Any  # host int32, P_G order
    pmask_B_L: Any  # host
    sampled: Any  # stages.Sampled: rollout, verdicts, timings
    groups: Groups  # the rollout with its rewards and loss masks (stages.score)
    version: int  # the params it was sampled with: theta_version (staleness = step - version)


class Started(NamedTuple):
    """A batch whose sampling has run and whose verification is in flight."""

    problems: Sequence
    prompt_B_L: Any
    pmask_B_L: Any
    sampling: Any  # stages.Sampling
    version: int


class Ahead(NamedTuple):
    """The producer's state between steps (after step k, with d = off_policy_steps)."""

    behind: Optional[tuple]  # params snapshots theta_{k+1-d} .. theta_k; None: not made yet
    started: tuple  # futures of the Started batches k+1 .. k+d (empty after a resume)


class Now:
    """`begin`'s result when it runs on the loop's thread: already there."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def inline(fn, *args) -> Now:
    """Run `fn` now, on the calling thread (`take`'s default `run`)."""
    return Now(fn(*args))


def take(ahead: Ahead, step: int, params, *, begin: Callable[[int, Any, int], Started],
         finish: Callable[[Started], Made], snapshot: Callable[[Any], Any],
         off_policy_steps: int, last: int, run: Callable = inline) -> tuple[Ahead, Made]:
    """-> (ahead, batch `step`). `begin(j, params, version)` starts batch j from `params`
    (the state's, or a snapshot); `finish` waits for it and scores it; `snapshot(params)` is
    a copy the producer owns; `last`: this invocation's end (no batch is started past it).
    `run(begin, *args)` -> its future: `inline` (the loop's thread) or a one-thread executor's
    `submit` (`producer`), which starts batch k+d while `take` returns and update k runs."""
    d = off_policy_steps
    if d == 0:
        return ahead, finish(begin(step, params, step))
    behind, started = ahead
    if not started:  # the run's first step, or a resume: batches step .. step+d-1 are redone
        behind = behind if behind is not None else (snapshot(params),) * d
        started = tuple(run(begin, j, behind[j - step], max(0, j - d))
                        for j in range(step, min(step + d, last)))
    now = snapshot(params)  # theta_step, before the update donates it
    if step + d < last:
        started = started + (run(begin, step + d, now, step),)
    return Ahead(behind[1:] + (now,), started[1:]), finish(started[0].result())


def producer(off_policy_steps: int, own_devices: bool, processes: int,
             one_turn: bool) -> Optional[ThreadPoolExecutor]:
    """The producer thread `take` starts batches on (its `submit` is `run`), or None for the
    loop's own thread: only with batches ahead, the sampler on devices of its own, one
    process (several would interleave their collectives differently) and one turn (episodes
    share the environment's tool pool with evaluation). The caller shuts it down."""
    if off_policy_steps and own_devices and processes == 1 and one_turn:
        return ThreadPoolExecutor(1, thread_name_prefix="producer")
    return None


def fresh(off_policy_steps: int, restored: Optional[Sequence] = None,
          started: Optional[tuple] = None) -> Ahead:
    """The producer's state at a run's start (`restored`: the checkpoint's snapshots;
    `started`: its batches in flight, where they cannot be sampled again from the snapshots:
    a carried stream's, carry.restore)."""
    if not off_policy_steps:
        return Ahead((), ())
    return Ahead(tuple(restored) if restored is not None else None, started or ())


def version_lag(step: int, made: Made) -> dict:
    """The version lag of the policy's tokens the update at `step` trains on (step minus the
    params version each was sampled under: the batch's, or each token's where they vary),
    max and mean."""
    r = made.sampled.rollout
    mask = np.asarray(r.mask_B_R if r.loss_mask_B_R is None else r.loss_mask_B_R) > 0
    version = made.version if r.version_B_R is None else np.asarray(r.version_B_R)
    lag = (step - np.broadcast_to(version, mask.shape))[mask]
    return {"rollout/version_lag_max": float(lag.max()) if lag.size else 0.0,
            "rollout/version_lag_mean": float(lag.mean()) if lag.size else 0.0}


def copy_policy(params) -> dict:
    """A snapshot of the trained params the sampler reads ({"policy": ...}; a PPO critic is
    not copied): new buffers on the same devices, which the update's donation of the state
    cannot delete."""
    return jax.tree.map(lambda x: x.copy(), {"policy": params["policy"]})


def restore(ckpt, step: int, params, off_policy_steps: int,
            snapshot: Callable[[Any], Any]) -> Optional[tuple]:
    """The snapshots checkpointed at `step`, placed as `snapshot` places them; None at a
    run's start, for a synchronous run, or when the checkpoint's count is not
    `off_policy_steps` (a resume that changed it: the batches in flight are then sampled
    from the resumed params, as at a run's start)."""
    if not off_policy_steps or not step:
        return None
    like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                        snapshot(params))
    return ckpt.restore_behind(step, [like] * off_policy_steps)


def settle(ahead: Ahead) -> None:
    """Wait until the batches in flight are sampled and handed to the verifier (a producer
    thread's work), before the loop's thread samples with the same generators itself (an
    evaluation)."""
    for future in ahead.started:
        future.result()


def drop(ahead: Ahead) -> None:
    """Let go of batches started but never to be finished (the run stops early: a resume
    samples them again): wait for a producer thread's sampling to end, then cancel their
    queued verification, so that closing the verifier does not wait for it."""
    for future in ahead.started:
        try:
            started = future.result()
        except Exception:  # noqa: BLE001 (a batch nobody will train on: its error is moot)
            continue
        for verdicts in getattr(started.sampling, "futures", ()):
            verdicts.cancel()
