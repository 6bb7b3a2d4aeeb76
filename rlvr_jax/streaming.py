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

Reproducible by construction: no decision depends on wall-clock time. A call issued at
boundary t is appended at boundary t+d whatever its latency (the driver waits only for one
that is not back by then: that wait is the devices' idle time, `rollout/device_idle_share`);
rows are refilled in queue order; when no row is live the driver skips to the next boundary
something is due at. So an episode's tokens depend on its prompt, its sequence's random
stream (sampling.sequence_uniforms), the params and its observations only: they are the
lock-step sampler's for the same params, whatever B, k, d and the latencies (tested). What a
row sees is the same computation in either driver (turn_sampler.py's pieces).

Environment work (open, calls, finish, close) runs on worker threads, never on the thread
that drives the devices: one thread, in the order issued, unless the environment says its
episodes may be stepped concurrently (`concurrent_episodes = True`: disjoint episodes from
several threads). Every episode opened is closed, on every path (an exception included).

What a call costs the rows: held (the default), a row waits d chunks of k steps per call
with its cache kept (`rollout/useful_row_steps` counts the loss); released
(`Schedule.release`), the row takes another episode and the caller resumes in a free row
once its observation is appended, its history prefilled again (`turn_sampler.resume`: the
recompute, counted in `stream/recomputed_tokens_per_episode`). Either way the tokens are
the lock-step driver's (tested; a resumed row's log-probs to float rounding). One process
only (several would have to agree on every boundary's refills: not built; refused).
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import jax.numpy as jnp
import numpy as np

from rlvr_jax import distributed, episodes
from rlvr_jax.envs.base import SANDBOX_ERROR, Environment
from rlvr_jax.episodes import OUTCOMES, REASONS, Glue, _text, stats, turn_text
from rlvr_jax.turn_sampler import STOP_BUDGET, STOP_CALL, STOP_EOS, TurnSampler
from rlvr_jax.types import Generated, Rollout, Status, Verdict


@dataclass(frozen=True)
class Schedule:
    """How episodes flow through the rows (config: rollout.stream)."""

    rows: int  # B decode rows
    insert_rows: int  # M: episodes inserted per insert call (static shape)
    chunk_steps: int  # k: decode steps between boundaries
    call_delay: int  # d: a call issued at boundary t is appended at boundary t + d
    env_threads: int = 4  # worker threads for an environment with concurrent episodes
    # True: a row whose turn ended on a call takes another episode while the call runs; its
    # own resumes in a free row once the observation is appended, its history (prompt ++
    # response so far ++ observation) prefilled again. False: the row waits for its call.
    release: bool = False


class _Timed:
    """Environment jobs on worker threads, each job's seconds recorded."""

    def __init__(self, threads: int):
        self.threads = threads
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="env")
        self.call_s: list[float] = []  # per call: its batch's seconds

    def submit(self, fn: Callable, *args, calls: int = 0) -> Future:
        def job():
            t0 = time.perf_counter()
            out = fn(*args)
            self.call_s.extend([time.perf_counter() - t0] * calls)
            return out
        return self.pool.submit(job)


def run(sampler: TurnSampler, env: Environment, tokenizer, glue: Glue, params, prompt_N_L,
        pmask_N_L, key, *, max_turns: int, put: Callable, schedule: Schedule,
        group_size: int = 1, contexts=None, rows_N=None) -> Generated:
    """N episodes (host arrays in, host arrays out, in input order; prompts in P_G order, G
    = `group_size`) through `schedule.rows` decode rows. The record is episodes.run's."""
    n = len(prompt_N_L)
    contexts = contexts if contexts is not None else [{}] * n
    threads = schedule.env_threads if getattr(env, "concurrent_episodes", False) else 1
    jobs = _Timed(threads)
    opens: dict[int, Future] = {}  # first episode of an open batch -> its future
    try:
        return _Driver(sampler, env, tokenizer, glue, params, np.asarray(prompt_N_L),
                       np.asarray(pmask_N_L), key, max_turns, put, schedule, group_size,
                       contexts, rows_N, jobs, opens).run()
    finally:
        # Jobs not started are dropped (an exception cut the run: their episodes are closed
        # below); every job running is waited for.
        jobs.pool.shutdown(wait=True, cancel_futures=True)
        leftover = []
        for f in opens.values():
            if f.cancelled():
                continue
            try:
                leftover += [e for e in f.result() if not e.closed]
            except Exception:  # noqa: BLE001 (an open that raised has nothing to close)
                pass
        if leftover:  # an exception cut the run short: what it opened is closed
            env.close_episodes(leftover)


class _Driver:
    def __init__(self, sampler, env, tokenizer, glue, params, prompt_N_L, pmask_N_L, key,
                 max_turns, put, schedule: Schedule, group_size, contexts, rows_N, jobs, opens):
        self.s, self.env, self.tok, self.glue, self.params = sampler, env, tokenizer, glue, params
        self.prompt_N_L, self.pmask_N_L, self.key = prompt_N_L, pmask_N_L, key
        self.max_turns, self.put, self.sch, self.g = max_turns, put, schedule, max(group_size, 1)
        self.contexts, self.jobs, self.opens = contexts, jobs, opens
        n, b = len(prompt_N_L), schedule.rows
        self.n, self.b = n, b
        self.seq_N = np.arange(n) if rows_N is None else np.asarray(rows_N)
        self.tools = tuple(env.tools)
        self.turns_N = np.zeros(n, np.int32)
        self.reason_N = np.zeros(n, np.int8)
        self.failed_N = np.zeros(n, bool)
        self.calls_N_T_O = np.zeros((n, len(self.tools) + 1, len(OUTCOMES)), np.int32)
        self.cut_N = np.zeros(n, np.int32)
        self.episode: list = [None] * n  # env.Episode, once its open is back
        self.row_N = np.full(n, -1)  # the row an episode is in
        self.owner_B = np.full(b, -1)  # the episode in each row (-1: free)
        self.finals: list = [""] * n
        self.verdicts: list = [None] * n
        self.finishing: list = []  # (episodes' indices, future of their verdicts)
        self.due: dict[int, list] = {}  # boundary -> [(episode, future of its reply)]
        self.wait_s = 0.0  # the driver blocked on the environment (the devices idle)
        self.prefills = 0  # prompts prefilled by inserts
        self.col_N = np.zeros(n, np.int64)  # an episode's next column (host, at its stops)
        self.start_N = np.zeros(n, np.int64)  # its current turn's first column
        self.resumes: list[int] = []  # released episodes whose observation is appended
        self.recomputed = 0  # history tokens prefilled again by resumes

    # ------------------------------------------------------------------ helpers
    def _wait(self, future: Future):
        t0 = time.perf_counter()
        out = future.result()
        self.wait_s += time.perf_counter() - t0
        return out

    def _open_batch(self, i: int) -> None:
        """Open (on the environment's thread) the batch of M episodes that holds episode i
        (batches of M from episode 0, in queue order)."""
        first = i - i % self.sch.insert_rows
        if first < self.n and first not in self.opens:
            last = min(first + self.sch.insert_rows, self.n)
            ctx = [self.contexts[i] for i in range(first, last)]
            self.opens[first] = self.jobs.submit(self.env.open, ctx)

    def _opened(self, i: int):
        first = i - i % self.sch.insert_rows
        if self.episode[i] is None:
            for j, e in enumerate(self._wait(self.opens[first])):
                self.episode[first + j] = e
                self.failed_N[first + j] = bool(e.failed)  # its session could not open
        return self.episode[i]

    def _end(self, i: int, reason: str, failed: bool = False) -> None:
        self.reason_N[i] = REASONS.index(reason)
        self.failed_N[i] |= failed

    # ------------------------------------------------------------------ the boundaries
    def run(self) -> Generated:
        n, b, m, k = self.n, self.b, self.sch.insert_rows, self.sch.chunk_steps
        self._open_batch(0)
        self._open_batch(m)  # one batch ahead: its sessions start while the first decode
        queue = deque(range(n))
        # Prompt slots: those of the prompts one insert touches (the head group's, which may
        # be partly inserted already, and the next ones).
        self.q, self.slot_of = min(m, -(-(m - 1) // self.g) + 1), {}
        state, self.pc = self.s.empty(b, self.q)
        r = state.tokens_B_R.shape[1]
        o = self.s.observation_tokens
        self.res = Rollout(np.full((n, r), self.tok.pad_token_id, np.int32),
                           np.zeros((n, r), np.float32), np.zeros((n, r), np.float32),
                           np.zeros((n, r), np.float32))
        self.turn_rewards_N_R = np.zeros((n, r), np.float32)
        t0, t, chunks, live_sum = time.perf_counter(), 0, 0, 0
        ended: list[int] = []  # episodes that ended since the last boundary (rows to free)
        while True:
            obs_B_O = np.full((b, o), self.tok.pad_token_id, np.int32)
            len_B = np.zeros(b, np.int32)
            # 1. Observations due now (the only wait on the environment's calls).
            for i, future in self.due.pop(t, []):
                row = self.row_N[i]  # -1: released
                reply = self._wait(future)
                col = int(self.col_N[i])
                tool = self.tools.index(reply.tool) if reply.tool in self.tools else len(
                    self.tools)
                self.calls_N_T_O[i, tool, OUTCOMES.index(reply.outcome)] += 1
                self.turn_rewards_N_R[i, col - 1] += reply.reward  # the call's last token
                if reply.outcome == SANDBOX_ERROR:
                    self._end(i, "sandbox_error", failed=True)
                    ended.append(i)
                    continue
                ids, cut = self.glue.ids(reply.text, o)
                if col + len(ids) >= r:  # no slot left to answer in
                    self._end(i, "no_room")
                    ended.append(i)
                    continue
                self.cut_N[i] += cut
                if row < 0:  # appended to its record: it resumes in a free row
                    for x, v in zip(self.res, (ids, 0.0, 1.0, 0.0)):
                        x[i, col:col + len(ids)] = v
                    self.col_N[i] = self.start_N[i] = col + len(ids)
                    self.resumes.append(i)
                else:
                    obs_B_O[row, :len(ids)], len_B[row] = ids, len(ids)
            # 2. Finished episodes leave their rows (their records copied out).
            if ended:
                self._leave(ended, state)
                ended = []
            # 3. Free rows refilled: released episodes first (in the order their calls came
            # due), then new ones in queue order, M per call.
            free = [x for x in range(b) if self.owner_B[x] < 0]
            while self.resumes and free:
                take, self.resumes = self.resumes[:min(m, len(free))], self.resumes[
                    min(m, len(free)):]
                dest, free = free[:len(take)], free[len(take):]
                state = self._resume(state, take, dest)
            while queue and free:
                take = [queue.popleft() for _ in range(min(m, len(free), len(queue)))]
                dest, free = free[:len(take)], free[len(take):]
                for i in (take[0], take[-1], take[-1] + m):  # these, and the next batch
                    self._open_batch(i)
                state = self._insert(state, take, dest)
                for i, row in zip(take, dest):
                    e = self._opened(i)
                    if e.observation and not e.failed:  # what the environment showed at reset
                        room = min(o, r - 1)  # a slot is left for the first turn
                        ids, cut = self.glue.ids(e.observation, room)
                        self.cut_N[i] += cut
                        obs_B_O[row, :len(ids)], len_B[row] = ids, len(ids)
            if len_B.any():
                state = self.s.extend(self.params, state, self.put(obs_B_O), self.put(len_B),
                                      self.put(np.zeros(b, bool)))
            if not (self.owner_B >= 0).any() and not queue and not self.due:
                break
            live_B = np.asarray(distributed.to_host(state.live_B))
            if not live_B.any():  # every row waits on a call: on to the next one due
                t = min(self.due)
                continue
            # 4. A chunk of decoding; the rows that stopped in it, handled at boundary t+1.
            state = self.s.decode(self.params, state, np.int32(k))
            chunks += 1
            live_sum += int(live_B.sum())
            host = dict(zip(("live", "stop", "col", "start"), (np.asarray(x) for x in (
                distributed.to_host((state.live_B, state.stop_B, state.col_B,
                                     state.turn_start_B))))))
            stopped = [x for x in range(b) if live_B[x] and not host["live"][x]]
            t += 1
            if stopped:
                tokens_B_R = np.asarray(distributed.to_host(state.tokens_B_R))
                ended += self._stopped(stopped, host, tokens_B_R, t, state)
        steps = int(distributed.to_host(state.steps))
        wall = time.perf_counter() - t0
        for idx, future in self.finishing:
            for i, v in zip(idx, self._wait(future)):
                self.verdicts[i] = v
        return self._record(steps, chunks, live_sum, wall)

    def _insert(self, state, take: list, dest: list):
        """Episodes `take` into rows `dest`, from their prompts' slots: a prompt is prefilled
        once, when its group's first episode starts, and kept until its last has."""
        m, b, g, q = self.sch.insert_rows, self.b, self.g, self.q
        new = [p for p in dict.fromkeys(i // g for i in take) if p not in self.slot_of]
        free = [x for x in range(q) if x not in self.slot_of.values()]
        assert len(new) <= len(free), (new, self.slot_of)
        self.slot_of.update(zip(new, free))
        if new:
            first = [p * g for p in new] + [new[0] * g] * (q - len(new))
            slots = [self.slot_of[p] for p in new] + [q] * (q - len(new))  # q: dropped
            self.pc = self.s.prompts(self.params, self.pc, jnp.asarray(self.prompt_N_L[first]),
                                     jnp.asarray(self.pmask_N_L[first]), jnp.int32(slots))
            self.prefills += len(new)
        src_M = [self.slot_of[i // g] for i in take] + [0] * (m - len(take))
        dest_M = dest + [b] * (m - len(take))  # B: the write is dropped
        seq_M = [self.seq_N[i] for i in take] + [0] * (m - len(take))
        state = self.s.insert(state, self.pc, jnp.int32(src_M), jnp.int32(dest_M),
                              jnp.int32(seq_M), self.key)
        for i, row in zip(take, dest):
            self.row_N[i], self.owner_B[row] = row, i
            if i == min((i // g + 1) * g, self.n) - 1:  # its group's last: the slot is free
                del self.slot_of[i // g]
        return state

    def _resume(self, state, take: list, dest: list):
        """Released episodes `take` back into rows `dest`, their histories prefilled."""
        m, b = self.sch.insert_rows, self.b
        pick = take + [take[0]] * (m - len(take))
        # M rows (any M): whole on every device, as the prompt slots are; the rows' layout
        # is the piece's out_shardings.
        state = self.s.resume(self.params, state, *(jnp.asarray(x) for x in (
            self.prompt_N_L[pick], self.pmask_N_L[pick], self.res.tokens_B_R[pick],
            self.res.logp_B_R[pick], self.res.mask_B_R[pick], self.res.loss_mask_B_R[pick],
            np.int32(self.col_N[pick]), np.int32(dest + [b] * (m - len(take))),
            np.int32(self.seq_N[pick]))), self.key)
        for i, row in zip(take, dest):
            self.row_N[i], self.owner_B[row] = row, i
            self.recomputed += int(self.pmask_N_L[i].sum() + self.col_N[i])
        return state

    def _stopped(self, rows: list, host: dict, tokens_B_R, t: int, state) -> list[int]:
        """Rows whose turn stopped in the chunk before boundary t: the episodes that ended
        (returned), the calls issued (due at t + d); with `release`, the calling rows
        freed (their records copied out)."""
        ended, calls = [], []
        for row in rows:
            i = self.owner_B[row]
            self.turns_N[i] += 1
            self.col_N[i], self.start_N[i] = host["col"][row], host["start"][row]
            stop = host["stop"][row]
            if stop == STOP_EOS:
                self._end(i, "eos")
            elif stop == STOP_BUDGET:
                self._end(i, "budget")
            elif self.turns_N[i] == self.max_turns:  # the last turn's call is never run
                self._end(i, "max_turns")
            elif self.failed_N[i]:  # no session to call
                self._end(i, "sandbox_error")
            else:
                assert stop == STOP_CALL, stop
                calls.append((i, turn_text(self.tok, tokens_B_R[row, host["start"][row]:
                                                                 host["col"][row]])))
                continue
            ended.append(i)
        if calls and self.sch.release:
            self._copy_out([i for i, _ in calls], state)
            for i, _ in calls:
                self.owner_B[self.row_N[i]], self.row_N[i] = -1, -1
        if calls:
            if self.jobs.threads == 1:  # one thread: one batch (sessions in parallel)
                f = self.jobs.submit(self.env.step, [self.episode[i] for i, _ in calls],
                                     [text for _, text in calls], calls=len(calls))
                futures = [_item(f, j) for j in range(len(calls))]
            else:  # each call on its own: a slow one holds up no other
                futures = [_item(self.jobs.submit(self.env.step, [self.episode[i]], [text],
                                                  calls=1), 0) for i, text in calls]
            self.due.setdefault(t + self.sch.call_delay, []).extend(
                (i, f) for (i, _), f in zip(calls, futures))
        return ended

    def _copy_out(self, episodes: list[int], state) -> None:
        """The records of these episodes' rows into the host's."""
        rows = [self.row_N[i] for i in episodes]
        host = distributed.to_host((state.tokens_B_R, state.logp_B_R, state.mask_B_R,
                                    state.loss_mask_B_R))
        for dst, src in zip(self.res, host):
            dst[episodes] = np.asarray(src)[rows]

    def _leave(self, ended: list[int], state) -> None:
        """Ended episodes' rows copied out and freed (a released episode's record is the
        host's already); their final texts to `env.finish`, then `close_episodes`, on the
        environment's thread."""
        in_rows = [i for i in ended if self.row_N[i] >= 0]
        if in_rows:
            self._copy_out(in_rows, state)
            start, col = (np.asarray(x) for x in distributed.to_host((state.turn_start_B,
                                                                      state.col_B)))
            for i in in_rows:
                self.start_N[i], self.col_N[i] = start[self.row_N[i]], col[self.row_N[i]]
                self.owner_B[self.row_N[i]], self.row_N[i] = -1, -1
        for i in ended:
            self.finals[i] = _text(self.tok, self.res.tokens_B_R[i, self.start_N[i]:
                                                                 self.col_N[i]],
                                   self.tok.eos_token_id)
        episodes = [self.episode[i] for i in ended]

        def finish_and_close(episodes=episodes, texts=[self.finals[i] for i in ended]):
            try:
                return self.env.finish(episodes, texts)
            finally:
                self.env.close_episodes(episodes)
        self.finishing.append((list(ended), self.jobs.submit(finish_and_close)))

    def _record(self, steps: int, chunks: int, live_sum: int, wall: float) -> Generated:
        n, b = self.n, self.b
        verdicts = [Verdict(Status.SANDBOX_ERROR,
                            f"the episode's sandbox failed: {self.episode[i].failed}"[:300])
                    if self.failed_N[i] else self.verdicts[i] for i in range(n)]
        rollout = self.res._replace(turn_rewards_B_R=self.turn_rewards_N_R)
        row = stats(self.turns_N, self.calls_N_T_O, self.tools, self.reason_N, rollout,
                    self.cut_N, self.pmask_N_L)
        row["episode/turn_reward_mean"] = float(self.turn_rewards_N_R.sum() / n)
        call_s = self.jobs.call_s
        row.update(episodes.rollout_stats(self.wait_s, wall, rollout, steps, b, call_s))
        row.update({"stream/chunks": float(chunks),
                    "stream/live_rows_mean": live_sum / max(chunks, 1),
                    "stream/prefills_per_prompt": self.prefills / max(-(-n // self.g), 1),
                    "stream/recomputed_tokens_per_episode": self.recomputed / n})
        return Generated(rollout, self.finals, verdicts, {**row, **self.env.stats()})


def _item(future: Future, j: int) -> Future:
    """A future of element j of `future`'s list."""
    out: Future = Future()

    def done(f: Future):
        try:
            out.set_result(f.result()[j])
        except Exception as e:  # noqa: BLE001 (the caller's wait re-raises it)
            out.set_exception(e)
    future.add_done_callback(done)
    return out
