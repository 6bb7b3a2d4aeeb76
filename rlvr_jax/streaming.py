"""Episodes streamed through B decode rows, their environment calls overlapped with decoding
(issue 40). The lock-step driver (episodes.py) decodes every row until all have stopped,
then runs the whole batch's calls while the devices wait; here each row goes its own way:

    boundary t:  the observations due at t appended (extend), rows whose episodes ended
                 freed and refilled from the queue in order (insert; each prompt prefilled
                 once, into a prompt slot, for every episode of its group)
    chunk t:     every live row decodes at most k steps (jit); a row that stops on a call
                 sits out, the others go on
    boundary t+1: the calls of the rows that stopped in chunk t handed to the environment's
                 worker threads, due at boundary t+1+d; finished episodes' final texts
                 handed to `env.finish` and `close_episodes` there too

Reproducible by construction: no decision depends on wall-clock time. An episode's tokens
depend on its prompt, its sequence's random stream (sampling.sequence_uniforms), the params
and its observations only: the lock-step sampler's for the same params, whatever k, d and the
latencies (tested); a row's numbers do not depend on the other rows of its fixed-shape call.
Across row counts B they agree as far as the backend's matmuls round a row alike in batches of
other sizes (bitwise at the tests' sizes; at larger ones a near tie can draw otherwise:
experiments/async/README.md). Rows are refilled in queue order. A call issued at boundary t
is appended at t+d at the earliest; one not back then is deferred (`Schedule.defer`, the
default: appended once back, the other rows going on) or waited for (device idle). Only the
schedule (which row, which chunk) can depend on timing: which turns a run takes, so each
token's params, is fixed by the batches (carry.py's turn levels); no token or log-prob
depends on the schedule (tested bitwise across latency draws). With no row live the driver
waits for the first call it needs (deferring) or skips to the next boundary one is due at.

Environment work (open, calls, finish, close) runs on worker threads, never the one that
drives the devices: one, in the order issued, unless the environment's episodes may be
stepped concurrently (`concurrent_episodes = True`). Every episode opened is closed, on
every path (an exception included). Rows go to the host a gather of a few at a time; the
rows' places once a chunk (before and after it: one read). With `Schedule.lookahead` a, a
chunk's first a steps are queued before the boundary is handled: the rows decode meanwhile.

A call held (the default) keeps its row waiting, cache kept (`rollout/useful_row_steps`
counts the loss); released (`Schedule.release`), the row takes another episode and the
caller resumes in a free row once answered, its history prefilled again (`turn_sampler.
resume`; `stream/recomputed_tokens_per_episode`). Either way the tokens are the lock-step
driver's (tested; a resumed row's log-probs to float rounding).

Several processes each run this driver over every row (SPMD) and own the episodes of their
block of each batch (distributed.owners) in any row. What one learns from its environment
(a failed open, a reply, a verdict) is shared at the boundary it is due (one all-gather),
so all make the same refills and the run equals one process's (tested).

A `Stream` keeps its queue and calls in flight from batch to batch: later batches' episodes
take first turns in the rows a batch leaves, and go on in the next `run`s under their params
(carry.py: turn levels; each token's version recorded; stream_state.py: checkpoints).
"""

from __future__ import annotations

import time
from collections import deque
from functools import partial
from itertools import islice
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

import numpy as np

from rlvr_jax import distributed, stream_state
from rlvr_jax.envs.base import SANDBOX_ERROR, Environment
from rlvr_jax.episodes import OUTCOMES, REASONS, Glue, _text, turn_text
from rlvr_jax.stream_state import Batch, Ep, Seen, Timed
from rlvr_jax.turn_sampler import STOP_BUDGET, STOP_CALL, STOP_EOS, TurnSampler
from rlvr_jax.types import Generated


@dataclass(frozen=True)
class Schedule:
    """How episodes flow through the rows (config: rollout.stream)."""

    rows: int  # B decode rows
    insert_rows: int  # M: episodes inserted per insert call (static shape)
    chunk_steps: int  # k: decode steps between boundaries
    call_delay: int  # d: a call issued at boundary t is appended at boundary t + d
    env_threads: int = 0  # calls at once, of an environment with concurrent episodes (0: any)
    # True: a row whose turn ended on a call takes another episode while the call runs; its
    # own resumes in a free row once the observation is appended, its history (prompt ++
    # response so far ++ observation) prefilled again. False: the row waits for its call.
    release: bool = False
    # A call not back at its boundary: False, the rows wait for it; True, it is appended at
    # the first boundary it is back by, the other rows going on
    defer: bool = False
    # a: a chunk's first a steps queued before the driver handles its boundary (the live rows
    # decode them meanwhile; what it refills and appends starts a steps later). 0: none
    lookahead: int = 0


def run(sampler: TurnSampler, env: Environment, tokenizer, glue: Glue, params, prompt_N_L,
        pmask_N_L, key, *, max_turns: int, put: Callable, schedule: Schedule,
        group_size: int = 1, contexts=None, rows_N=None) -> Generated:
    """N episodes (host arrays in, host arrays out, in input order; prompts in P_G order, G
    = `group_size`) through `schedule.rows` decode rows. The record is episodes.run's."""
    stream = Stream(sampler, env, tokenizer, glue, max_turns=max_turns, put=put,
                    schedule=schedule, group_size=group_size)
    try:
        stream.add(0, prompt_N_L, pmask_N_L, key, contexts, rows_N)
        made = stream.run(params, 0, 0)
        # One batch, one params: the caller's version (per-token versions: a carried stream)
        return made._replace(rollout=made.rollout._replace(version_B_R=None))
    finally:
        stream.close()


class Stream:
    """The rows and the queue of episodes, kept from one batch to the next: `add` queues a
    batch's episodes, `run(params, version, j)` streams until batch j's have all ended and
    the later batches' turns of its level are taken (`carry` W: carry.py), and returns
    batch j's record; the later batches' episodes go on in the next `run`s, under their
    params. `close` closes every open episode."""

    def __init__(self, sampler: TurnSampler, env: Environment, tokenizer, glue: Glue, *,
                 max_turns: int, put: Callable, schedule: Schedule, group_size: int = 1,
                 carry: int = 0):
        self.s, self.env, self.tok, self.glue, self.put = sampler, env, tokenizer, glue, put
        self.carry, self.j = carry, 0  # W (carry.py: the turn levels), the batch being run
        self.max_turns, self.sch, self.g = max_turns, schedule, max(group_size, 1)
        self.jobs = Timed(schedule.env_threads if getattr(env, "concurrent_episodes", False) else 1)
        self.tools = tuple(env.tools)
        m, b = schedule.insert_rows, schedule.rows
        self.b = b
        # Prompt slots: those of the prompts one insert touches (the head group's, which may
        # be partly inserted already, and the next ones).
        self.q = min(m, -(-(m - 1) // self.g) + 1)
        self.state, self.pc = self.s.empty(b, self.q)
        self.r = self.state.tokens_B_R.shape[1]
        self.slot_of: dict = {}  # (batch, prompt) -> its prompt slot
        self.owner: list = [None] * b  # the episode in each row
        self.queue: deque = deque()  # episodes not started, in order
        self.batches: dict[int, Batch] = {}
        self.due: dict[int, list] = {}  # boundary -> [(episode, future of its reply)]
        self.deferred: list = []  # (episode, future) due before now and not back then
        self.resumes: list = []  # episodes out of rows, ready to go on (in order)
        self.ended: list = []  # episodes that ended since the last boundary (rows to free)
        self.t = 0  # boundaries so far (they go on counting across batches)
        self.params, self.version = None, None
        stream_state.new_counts(self)
        self.open_jobs: list = []  # every open submitted (`close` closes what is left)
        self.replayed = 0  # calls replayed into reopened sessions (a restored stream)

    # ------------------------------------------------------------------ the queue
    def add(self, j: int, prompt_N_L, pmask_N_L, key, contexts=None, rows_N=None) -> None:
        """Batch j's episodes, queued after those added before."""
        batch = Batch(j, prompt_N_L, pmask_N_L, key, contexts, rows_N, self.r,
                       len(self.tools), self.tok.pad_token_id)
        self.batches[j] = batch
        self.queue.extend(batch.eps)
        if hasattr(self.env, "prepare"):  # its sandboxes start now, not as rows free up
            self.jobs.submit(self.env.prepare, [batch.contexts[e.i] for e in batch.eps
                                                if e.mine])

    def _open(self, e: Ep) -> None:
        """Open (on the environment's thread) the batch of M episodes of e's batch that holds
        e (batches of M from its first episode; those started already, restored with their
        own sessions, left out)."""
        b, m = e.b, self.sch.insert_rows
        first = e.i - e.i % m
        if first not in b.opens:
            eps = [x for x in b.eps[first:first + m] if not x.started and x.mine]
            b.opens[first] = (eps, self.jobs.submit(self.env.open,
                                                    [b.contexts[x.i] for x in eps]))
            self.open_jobs.append(b.opens[first][1])

    def _opened(self, e: Ep):
        if e.episode is None:
            eps, future = e.b.opens[e.i - e.i % self.sch.insert_rows]
            for x, episode in zip(eps, self._wait(future, "open")):
                x.episode = episode
                x.failed |= bool(episode.failed)  # its session could not open
        return e.episode

    def _wait(self, future: Future, kind: str = "call"):
        """future's result; the seconds the driver (and so the devices) waited for it, by
        what it waited for (`stream_state.no_waits`)."""
        t0 = time.perf_counter()
        out = future.result()
        self.waits[kind] += time.perf_counter() - t0
        return out

    def _host(self, tree) -> list:
        """Device values as numpy; seconds blocked here: `rollout/device_s` (queued work done);
        each call one read (`rollout/host_reads_per_chunk`: a wait for the devices)."""
        t0 = time.perf_counter()
        out = [np.asarray(x) for x in distributed.to_host(tree)]
        self.synced += time.perf_counter() - t0
        self.fetched, self.reads = self.fetched + sum(x.nbytes for x in out), self.reads + 1
        return out

    def _end(self, e: Ep, reason: str, failed: bool = False) -> None:
        e.b.reason_N[e.i] = REASONS.index(reason)
        e.failed |= failed
        e.ended = True
        self.ended.append(e)

    # ------------------------------------------------------------------ the boundaries
    def run(self, params, version: int, j: int) -> Generated:
        """Stream until batch j's episodes have all ended; -> its record. `version`: the
        params' (each token records the version it was sampled under)."""
        self.params, self.version, self.j = params, version, j
        stream_state.new_counts(self)
        since, steps_before = self.jobs.mark(), int(distributed.to_host(self.state.steps))
        batch, b, k, o = self.batches[j], self.b, self.sch.chunk_steps, self.s.observation_tokens
        t0, chunks, live_sum, self.made = time.perf_counter(), 0, 0, 0
        queued = []  # the chunk's first steps, queued before this boundary's pieces
        for e in list(islice(self.queue, self.sch.insert_rows + 1))[::self.sch.insert_rows]:
            self._open(e)  # the first two opens: their sessions start while rows decode
        while True:
            obs_B_O = np.full((b, o), self.tok.pad_token_id, np.int32)
            len_B = np.zeros(b, np.int32)
            # 1. Observations due now (the only wait on the environment's calls).
            for e, reply in stream_state.due_now(self):
                self._observe(e, reply, obs_B_O, len_B)
            # 2. Finished episodes leave their rows (their records copied out).
            if self.ended:
                self._leave(self.ended)
                self.ended = []
            complete = not self._left(batch)
            # 3. Free rows refilled: episodes out of rows first (in the order they became
            # ready), then new ones in queue order, M per call (one batch's per call); only
            # turns this run may take (`allowed`).
            free = [] if complete else [x for x in range(b) if self.owner[x] is None]
            while free and (ready := [e for e in self.resumes if self.allowed(e)]):
                take = self._head(ready, len(free))
                self.resumes = [e for e in self.resumes if e not in take]  # take: <= M
                self._resume(take, free[:len(take)])
                free = free[len(take):]
            while self.queue and free and self.allowed(self.queue[0]):
                take = self._head(self.queue, len(free))
                for _ in take:
                    self.queue.popleft()
                ahead = list(islice(self.queue, self.sch.insert_rows))
                for e in take[:1] + take[-1:] + ahead[:1] + ahead[-1:]:
                    self._open(e)  # these, and the next M (their sessions start meanwhile)
                dest, free = free[:len(take)], free[len(take):]
                self._insert(take, dest)
                stream_state.shown_at_reset(self, take, dest, obs_B_O, len_B)
            if len_B.any():
                self.state = self.s.extend(self.params, self.state, self.put(obs_B_O),
                                           self.put(len_B), self.put(np.zeros(b, bool)))
            if complete:  # (nothing queued: steps are queued ahead only while rows are live)
                break
            # 4. The boundary's chunk of k steps (`lookahead` of them queued before its
            # pieces), read with the rows' places before and after each part: one read.
            self.state, places = self.s.chunk(self.params, self.state, np.int32(
                k - self.sch.lookahead if queued else k))
            parts, queued = queued + [places], []
            live_B, made, host = stream_state.chunk_places(self._host(
                [x for part in parts for x in part]))
            if not live_B.any():  # every row waits on a call: on to the next one needed
                needed = [x for x in self.deferred if self.allowed(x[0])]
                if needed:
                    stream_state.wait_any(self, needed)
                self.t = self.t + 1 if needed else min(self.due)
                continue
            chunks, live_sum, self.made = chunks + 1, live_sum + int(live_B.sum()), self.made + made
            stopped = np.flatnonzero(live_B & ~host["live"]).tolist()
            self.t += 1
            got = self._gather(stopped)  # queued before the next steps, not behind them
            if self.sch.lookahead and host["live"].any():  # they decode while the host works
                self.state, places = self.s.chunk(self.params, self.state,
                                                  np.int32(self.sch.lookahead))
                queued = [places]
            if stopped:
                self._stopped(stopped, host, self._rows(got))
        steps = int(distributed.to_host(self.state.steps)) - steps_before
        stream_state.verdicts(batch, partial(self._wait, kind="verdict"))
        wall = time.perf_counter() - t0  # the final verdicts' wait is the rollout's too
        del self.batches[j]
        return stream_state.record(self, batch, steps, chunks, live_sum, wall,
                                   self.jobs.since(since))

    def allowed(self, e: Ep) -> bool:
        """e's next turn may run now: every turn of batch j's episodes and earlier ones; of
        batch j + w (1 <= w <= W), the turns up to W + 1 - w (carry.py: the turn levels)."""
        return e.b.j <= self.j or e.turns <= self.j - e.b.j + self.carry

    def _left(self, batch: Batch) -> bool:
        """This run has work left: batch j has episodes going on, or a later batch has turns
        this run must take (what a run takes is then a function of the batches alone)."""
        return batch.left > 0 or any(not e.ended and self.allowed(e) for x in
                                     self.batches.values() if x is not batch for e in x.eps)

    def _head(self, items, free: int) -> list:
        """The first episodes of `items` that go in one call: at most M and `free`, of one
        batch (a call draws with one batch's key)."""
        take = []
        for e in items:
            if len(take) == min(self.sch.insert_rows, free) or (take and e.b is not take[0].b):
                break
            take.append(e)
        return take

    def _observe(self, e: Ep, seen: Seen, obs_B_O, len_B) -> None:
        """A call's reply: into e's row's observation, or its record when e is out of rows."""
        col, ids = e.col, seen.ids
        e.b.calls_N_T_O[e.i, seen.tool, seen.outcome] += 1
        e.b.res.turn_rewards_B_R[e.i, col - 1] += seen.reward  # the call's last token
        if OUTCOMES[seen.outcome] == SANDBOX_ERROR:
            return self._end(e, "sandbox_error", failed=True)
        if col + len(ids) >= self.r:  # no slot left to answer in
            return self._end(e, "no_room")
        e.b.cut_N[e.i] += seen.cut
        if e.row < 0:  # appended to its record: it resumes in a free row
            for x, v in zip(e.b.res[:4], (ids, 0.0, 1.0, 0.0)):
                x[e.i, col:col + len(ids)] = v
            e.col = e.start = col + len(ids)
            self.resumes.append(e)
        else:
            obs_B_O[e.row, :len(ids)], len_B[e.row] = ids, len(ids)

    def _insert(self, take: list, dest: list) -> None:
        """Episodes `take` (of one batch) into rows `dest`, from their prompts' slots: a
        prompt is prefilled once, when its group's first episode starts, and kept until its
        last has (or the params change)."""
        m, b, g, q = self.sch.insert_rows, self.b, self.g, self.q
        batch = take[0].b
        new = [p for p in dict.fromkeys(e.i // g for e in take) if (batch.j, p) not in
               self.slot_of]
        used = set(self.slot_of.values())
        free = [x for x in range(q) if x not in used]
        assert len(new) <= len(free), (new, self.slot_of)
        self.slot_of.update({(batch.j, p): x for p, x in zip(new, free)})
        if new:
            first = [p * g for p in new] + [new[0] * g] * (q - len(new))
            slots = [self.slot_of[batch.j, p] for p in new] + [q] * (q - len(new))  # q: dropped
            self.pc = self.s.prompts(self.params, self.pc,
                                     batch.prompt_N_L[first], batch.pmask_N_L[first],
                                     np.int32(slots))
            self.prefills += len(new)
        src_M = [self.slot_of[batch.j, e.i // g] for e in take] + [0] * (m - len(take))
        dest_M = dest + [b] * (m - len(take))  # B: the write is dropped
        seq_M = [batch.seq_N[e.i] for e in take] + [0] * (m - len(take))
        self.state = self.s.insert(self.state, self.pc, np.int32(src_M), np.int32(dest_M),
                                   np.int32(seq_M), batch.key)
        for e, row in zip(take, dest):
            e.row, self.owner[row], e.started = row, e, True
            e.versions.append((0, self.version))
            if e.i == min((e.i // g + 1) * g, batch.n) - 1:  # its group's last: slot freed
                del self.slot_of[batch.j, e.i // g]

    def _resume(self, take: list, dest: list) -> None:
        """Episodes `take` (of one batch, out of rows) back into rows `dest`, their histories
        prefilled under the current params."""
        m, b, batch = self.sch.insert_rows, self.b, take[0].b
        pick = [e.i for e in take] + [take[0].i] * (m - len(take))
        col = [e.col for e in take] + [take[0].col] * (m - len(take))
        start = [e.start for e in take] + [take[0].start] * (m - len(take))
        # M rows (any M): whole on every device, as the prompt slots are; the rows' layout
        # is the piece's out_shardings.
        self.state = self.s.resume(self.params, self.state, *(np.asarray(x) for x in (
            batch.prompt_N_L[pick], batch.pmask_N_L[pick], batch.res.tokens_B_R[pick],
            batch.res.logp_B_R[pick], batch.res.mask_B_R[pick], batch.res.loss_mask_B_R[pick],
            np.int32(col), np.int32(start), np.int32(dest + [b] * (m - len(take))),
            np.int32(batch.seq_N[pick]))), batch.key)
        for e, row in zip(take, dest):
            e.row, self.owner[row], e.live = row, e, False
            self.recomputed += int(batch.pmask_N_L[e.i].sum() + e.col)
            if e.versions[-1][1] != self.version:  # new params (the run starts out of rows)
                e.versions.append((e.col, self.version))

    def _stopped(self, rows: list, host: dict, got: list) -> None:
        """Rows whose turn stopped in the chunk before boundary t (`got`: their records,
        gathered): episodes that ended, copied out (to leave at t), calls issued (due at
        t + d); with `release`, the calling rows copied out too (the rows freed)."""
        calls = []
        for row in rows:
            e = self.owner[row]
            e.turns += 1
            e.col, e.start = int(host["col"][row]), int(host["start"][row])
            stop = host["stop"][row]
            if stop == STOP_EOS:
                self._end(e, "eos")
            elif stop == STOP_BUDGET:
                self._end(e, "budget")
            elif e.turns == self.max_turns:  # the last turn's call is never run
                self._end(e, "max_turns")
            elif e.failed:  # no session to call
                self._end(e, "sandbox_error")
            else:
                assert stop == STOP_CALL, stop
                calls.append(e)
        got = dict(zip(rows, got))  # each row's record, gathered (`_gather`)
        for e in calls:
            e.said.append(turn_text(self.tok, got[e.row][0][e.start:e.col]))
        # Copied out: the ended rows; the calling rows released, and always those whose
        # next turn is a later run's.
        out = [e for e in self.ended if e.row in got] + [
            e for e in calls if self.sch.release or not self.allowed(e)]
        if out:
            self._copy_out(out, [got[e.row] for e in out])
        stream_state.call(self, calls, self.t + self.sch.call_delay)

    def _gather(self, rows: list) -> list:
        """Rows `rows` gathered on the devices (queued, not read), a fixed number of rows a
        gather (one compile), never the whole [B, R] arrays."""
        m = min(self.b, max(self.sch.insert_rows, 8))
        return [(len(pick), self.s.rows(self.state, np.int32(pick + [0] * (m - len(pick)))))
                for pick in (rows[at:at + m] for at in range(0, len(rows), m))]

    def _rows(self, gathered: list) -> list:
        """Each gathered row's (tokens, logp, mask, loss mask, col, turn start, live), host."""
        got = [self._host(arrays) for _, arrays in gathered]
        return [[x[k] for x in g] for (n, _), g in zip(gathered, got) for k in range(n)]

    def _copy_out(self, eps: list, got=None) -> None:
        """These episodes' rows (`got`: fetched already) into their records (host), with
        where each is; the rows freed."""
        got = got or self._rows(self._gather([e.row for e in eps]))
        for e, (*arrays, col, start, live) in zip(eps, got):
            for dst, src in zip(e.b.res[:4], arrays):
                dst[e.i] = src
            e.col, e.start, e.live = int(col), int(start), bool(live)
            self.owner[e.row], e.row = None, -1

    def _leave(self, ended: list) -> None:
        """Ended episodes' rows copied out and freed (one out of rows has its record on the
        host already); their final texts to `env.finish`, then `close_episodes`, on the
        environment's thread."""
        in_rows = [e for e in ended if e.row >= 0]
        if in_rows:
            self._copy_out(in_rows)
        for e in ended:
            e.b.finals[e.i] = _text(self.tok, e.b.res.tokens_B_R[e.i, e.start:e.col],
                                    self.tok.eos_token_id)
            e.b.left -= 1
        for batch in dict.fromkeys(e.b for e in ended if e.mine):
            mine = [e for e in ended if e.b is batch and e.mine]
            episodes = [e.episode for e in mine]

            def finish_and_close(episodes=episodes, texts=[batch.finals[e.i] for e in mine]):
                try:
                    return self.env.finish(episodes, texts)
                finally:
                    self.env.close_episodes(episodes)
            batch.finishing.append((mine, self.jobs.submit(finish_and_close)))

    def snapshot(self) -> dict:
        """What a checkpoint keeps of the stream between two `run`s (stream_state.py)."""
        return stream_state.snapshot(self)

    def restore(self, saved: dict) -> None:
        """The stream a `snapshot` saved, its batches added again first (stream_state.py)."""
        stream_state.restore(self, saved)

    def close(self) -> None:
        """Jobs not started dropped, those running waited for; every open episode closed."""
        stream_state.close(self)
