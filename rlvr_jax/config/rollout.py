"""Where each RL step's batch comes from: asynchronous rollouts (rlvr_jax/rollouts.py) and
multi-turn episodes streamed through decode rows (rlvr_jax/streaming.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr_jax.config.choices import _check


@dataclass
class StreamConfig:
    """Multi-turn episodes streamed through decode rows, each environment call overlapped
    with the other rows' decoding (rlvr_jax/streaming.py). Reproducible: a call issued at a
    boundary is appended `call_delay_chunks` boundaries later at the earliest, rows are
    refilled in queue order, and a call not back by then is waited for or deferred
    (`late_calls`) so that no episode's tokens depend on wall-clock time."""

    rows: int = 0  # decode rows the step's episodes flow through; 0: lock step (episodes.py)
    insert_rows: int = 0  # episodes inserted (prefilled) per call; 0: rows // 8, at least 1
    chunk_steps: int = 16  # decode steps between boundaries
    # the first steps of each chunk, queued before the driver handles the boundary: the live
    # rows decode them while it appends replies, refills rows and issues calls (which then
    # start that many steps later). 0: the devices wait for the driver at every boundary
    lookahead_steps: int = 0
    call_delay_chunks: int = 1  # boundaries between a call's issue and its observation
    # the most calls at once of an environment whose episodes may be stepped concurrently
    # (`concurrent_episodes`), each on a worker thread, and as many opens, finishes and
    # closes; 0: no cap (every call in flight runs at once, as lock step hands a turn's calls
    # over together). A call that waited for a thread shows in rollout/env_call_queued_p99_s.
    # Any other environment's work runs on one thread, in the order issued
    env_threads: int = 0
    # true: a row whose turn ends on a call takes another episode meanwhile; the episode
    # resumes in a free row, its history prefilled again (rows never wait on calls, at the
    # cost of the recompute). false: the row waits for its call, its cache kept.
    release_rows: bool = False
    # W >= 1: episodes carried across updates (rlvr_jax/carry.py): while step j's batch
    # streams, the next W batches' episodes take their first turns in the rows it leaves
    # (batch j + w up to turn W + 1 - w), and go on under the next params, each resumed
    # with its history prefilled under them; a token's version lag is then at most
    # rollout.off_policy_steps + W (logged)
    carry_batches: int = 0
    # a call not back at its boundary: defer (appended at the first boundary it is back by,
    # the other rows going on) or wait (the rows wait for it). Either way no episode's
    # tokens, log-probs or versions depend on when a call comes back (tested)
    late_calls: str = "defer"

    def check(self, key: str = "rollout.stream") -> None:
        _check(self.rows >= 0, f"{key}.rows", "must be >= 0 (0: lock step)")
        _check(0 <= self.insert_rows <= max(self.rows, 1), f"{key}.insert_rows",
               f"must be in [0, {key}.rows] (0: rows // 8)")
        _check(self.chunk_steps >= 1, f"{key}.chunk_steps", "must be >= 1")
        _check(0 <= self.lookahead_steps <= self.chunk_steps, f"{key}.lookahead_steps",
               f"must be in [0, {key}.chunk_steps]")
        _check(self.call_delay_chunks >= 0, f"{key}.call_delay_chunks", "must be >= 0")
        _check(self.env_threads >= 0, f"{key}.env_threads", "must be >= 0 (0: no cap)")
        _check(self.carry_batches >= 0, f"{key}.carry_batches", "must be >= 0 (0: none)")
        _check(self.carry_batches == 0 or self.rows > 0, f"{key}.carry_batches",
               f"carries streamed episodes: set {key}.rows > 0")
        _check(self.late_calls in ("defer", "wait"), f"{key}.late_calls",
               "must be defer or wait")

    @property
    def inserts(self) -> int:
        return self.insert_rows or max(self.rows // 8, 1)


@dataclass
class RolloutConfig:
    """Where each step's batch comes from (rlvr_jax/rollouts.py)."""

    # 0: sampled and verified at its step, with the params the update then trains (on-policy).
    # d > 0: batch k is sampled with the params from before update k-d and verified while the
    # updates in between run (d copies of the trained params kept; algo.loss.correction
    # weighs the staleness). Fixed schedule: bitwise reproducible, resumable.
    off_policy_steps: int = 0
    # > 0: the sampler runs on its own devices (the last N of each process's), the update on
    # the rest, the params copied across after each update. 0: they share every device.
    sampler_devices: int = 0
    stream: StreamConfig = field(default_factory=StreamConfig)  # multi-turn episodes

    def check(self, key: str = "rollout") -> None:
        _check(self.off_policy_steps >= 0, f"{key}.off_policy_steps", "must be >= 0")
        _check(self.sampler_devices >= 0, f"{key}.sampler_devices", "must be >= 0")
        self.stream.check(f"{key}.stream")
        _check(self.stream.carry_batches == 0 or self.off_policy_steps >= 1,
               f"{key}.stream.carry_batches", "carried episodes are sampled under older "
               f"params than their step's: set {key}.off_policy_steps >= 1 (and "
               "algo.loss.correction)")
