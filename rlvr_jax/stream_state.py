"""A stream's episodes on the host (streaming.py): each episode's state (`Ep`) and its
batch's records (`Batch`), and what a checkpoint keeps of them between two of the stream's
runs (`snapshot`, `restore`: episodes carried across updates, carry.py), and what several
processes share of their own episodes at a boundary (`replies_due`, `shown_at_reset`)."""

from __future__ import annotations

import time
from collections import deque
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

import jax
import numpy as np

from rlvr_jax.envs.base import SANDBOX_ERROR
from rlvr_jax import distributed, episodes
from rlvr_jax.episodes import OUTCOMES, REASONS, stats
from rlvr_jax.types import Generated, Rollout, Status, Verdict

# `Timed(0)`'s pools: threads are made as jobs wait for one, so this only bounds a runaway.
UNCAPPED = 4096


@dataclass(eq=False)
class Ep:
    """One episode's host-side state (its record lives in its batch's arrays)."""

    b: "Batch"
    i: int  # its index in the batch
    episode: object = None  # the environment's Episode, once its open is back
    row: int = -1  # the row it decodes in (-1: none)
    col: int = 0  # next column (host: at its stops, or when it left its row)
    start: int = 0  # its current turn's first column
    live: bool = False  # it left its row in the middle of a turn (carried: resumes there)
    started: bool = False
    ended: bool = False
    turns: int = 0
    failed: bool = False
    why: str = ""  # why its sandbox failed (a restored episode's, its session not reopened)
    said: list = field(default_factory=list)  # its calls' texts, in order (a resume replays)
    counted: int = 0  # its calls counted as needed (`rollout/late_call_share`)
    versions: list = field(default_factory=list)  # (first column, params version) segments

    @property
    def mine(self) -> bool:
        """This process owns it: it opens, steps, finishes and closes its episode (every
        process decodes every row; distributed.owners)."""
        return bool(self.b.mine_N[self.i])


class Seen(NamedTuple):
    """A call's reply as every process applies it (the episode's owner tokenized it)."""

    tool: int  # index in the environment's tools (their count: an unknown tool)
    outcome: int  # index in episodes.OUTCOMES
    reward: float
    ids: list  # the observation's ids (glue included); empty for a sandbox error
    cut: int  # the reply's text was cut to fit


class Batch:
    """A batch's episodes and their records (host arrays [N, R])."""

    def __init__(self, j: int, prompt_N_L, pmask_N_L, key, contexts, seq_N, r: int,
                 tools: int, pad_id: int):
        n = len(prompt_N_L)
        self.j, self.n, self.key = j, n, key
        self.prompt_N_L, self.pmask_N_L = np.asarray(prompt_N_L), np.asarray(pmask_N_L)
        self.contexts = contexts if contexts is not None else [{}] * n
        self.seq_N = np.arange(n) if seq_N is None else np.asarray(seq_N)
        self.owner_N = distributed.owners(n)
        self.mine_N = self.owner_N == jax.process_index()
        self.eps = [Ep(self, i) for i in range(n)]
        self.res = Rollout(np.full((n, r), pad_id, np.int32), np.zeros((n, r), np.float32),
                           np.zeros((n, r), np.float32), np.zeros((n, r), np.float32),
                           np.zeros((n, r), np.float32))
        self.calls_N_T_O = np.zeros((n, tools + 1, len(OUTCOMES)), np.int32)
        self.reason_N = np.zeros(n, np.int8)
        self.cut_N = np.zeros(n, np.int32)
        self.finals: list = [""] * n
        self.verdicts: list = [None] * n
        self.finishing: list = []  # (episodes, future of their verdicts)
        self.opens: dict[int, tuple] = {}  # first of M episodes -> (them, future of the open)
        self.left = n  # episodes not yet ended

    def versions(self) -> np.ndarray:
        """int32 [N, R]: the params version each column was written under."""
        out = np.zeros(self.res.tokens_B_R.shape, np.int32)
        for e in self.eps:
            for col, v in e.versions:
                out[e.i, col:] = v
        return out


class Timed:
    """Environment jobs on worker threads, each call's seconds recorded, and the seconds it
    waited for a free thread. With several threads, calls and the episodes' other work
    (prepare, open, finish and close) have a pool each, so no session's open waits for a
    thread behind slow calls. `threads`: 0, no cap (a thread for every job in flight, made
    as needed: the calls of a stream run as many at once as lock step's, which hands a
    turn's calls over together); n, at most n at once; 1, every job in the order issued."""

    def __init__(self, threads: int):
        self.threads = threads
        cap = threads or UNCAPPED
        self.pool = ThreadPoolExecutor(max_workers=cap, thread_name_prefix="env")
        self.calls = ThreadPoolExecutor(max_workers=cap, thread_name_prefix="env-call") \
            if threads != 1 else self.pool  # one thread: every job in the order issued
        self.call_s: list[float] = []  # per call: its batch's seconds
        self.queued_s: list[float] = []  # per call: seconds from its submit to a thread

    def submit(self, fn: Callable, *args, calls: int = 0) -> Future:
        issued = time.perf_counter()

        def job():
            t0 = time.perf_counter()
            out = fn(*args)
            self.call_s.extend([time.perf_counter() - t0] * calls)
            self.queued_s.extend([t0 - issued] * calls)
            return out
        return (self.calls if calls else self.pool).submit(job)

    def mark(self) -> tuple[int, int]:
        """Where the calls' records stand now (`since`)."""
        return len(self.call_s), len(self.queued_s)

    def since(self, mark: tuple[int, int]) -> tuple[list, list]:
        """The seconds of the calls done since `mark`, and their waits for a thread."""
        return self.call_s[mark[0]:], self.queued_s[mark[1]:]

    def shutdown(self) -> None:
        """Jobs not started dropped, those running waited for."""
        for pool in dict.fromkeys((self.calls, self.pool)):
            pool.shutdown(wait=True, cancel_futures=True)


def why(e: Ep) -> str:
    """Why e's sandbox failed ("" if it did not)."""
    return (e.episode.failed if e.episode is not None else "") or e.why


def carried(stream) -> int:
    """Episodes started and not ended at one of their turns' stops (on in the next `run`).
    One that ended on a call's reply (no room for it, a sandbox error) still counts: when a
    deferred reply is back, in this run or the next, is timing."""
    turn_ends = [REASONS.index(r) for r in ("eos", "budget", "max_turns")]
    return sum(e.started and not (e.ended and e.b.reason_N[e.i] in turn_ends)
               for b in stream.batches.values() for e in b.eps)


def snapshot(stream) -> dict:
    """What a resume rebuilds the stream from, between two `run`s (JSON): every started
    episode's record and counters, the calls in flight (their texts; due how many
    boundaries on) and the order of those waiting for a row. Rows and prompt slots are
    empty there (a run ends with every carried episode at a turn boundary, out of its row:
    carry.py); the sessions are not saved: `restore` opens them again and replays their
    calls."""
    assert all(e is None for e in stream.owner) and not stream.slot_of, "rows in use"
    out = {"version": stream.version, "queued": sorted(stream.batches), "batches": [],
           "resumes": [[e.b.j, e.i] for e in
                                                                stream.resumes],
           "due": [[0, e.b.j, e.i] for e, _ in stream.deferred] + [
               [t - stream.t, e.b.j, e.i] for t in sorted(stream.due) for e, _ in stream.due[t]]}
    for batch in stream.batches.values():
        verdicts(batch, stream._wait)  # the ended episodes'
        eps = []
        for e in batch.eps:
            if not e.started:
                continue
            c, i = e.col, e.i
            eps.append({
                "i": i, "col": c, "start": e.start, "live": e.live, "turns": e.turns,
                "failed": e.failed, "why": why(e), "ended": e.ended, "said": e.said,
                "versions": e.versions, "reason": int(batch.reason_N[i]),
                "cut": int(batch.cut_N[i]), "calls": batch.calls_N_T_O[i].tolist(),
                "record": [x[i, :c].tolist() for x in batch.res[:5]],
                "final": batch.finals[i], "verdict": verdict_json(batch.verdicts[i])})
        out["batches"].append({"j": batch.j, "eps": eps})
    return out

def restore(stream, st: dict) -> None:
    """The stream `snapshot` saved, its batches added again first: records and counters
    back, the started episodes' sessions opened again with their answered calls
    replayed in order (their replies are in the records already), the calls that were in
    flight issued again."""
    stream.version = st["version"]
    for saved in st["batches"]:
        batch = stream.batches[saved["j"]]
        for d in saved["eps"]:
            e, i, c = batch.eps[d["i"]], d["i"], d["col"]
            e.col, e.start, e.live, e.turns = d["col"], d["start"], d["live"], d["turns"]
            e.failed, e.why, e.ended, e.started = d["failed"], d["why"], d["ended"], True
            e.said, e.versions = list(d["said"]), [tuple(v) for v in d["versions"]]
            batch.reason_N[i], batch.cut_N[i] = d["reason"], d["cut"]
            batch.calls_N_T_O[i] = d["calls"]
            for x, v in zip(batch.res[:5], d["record"]):
                x[i, :c] = v
            batch.finals[i], batch.verdicts[i] = d["final"], verdict_of(d["verdict"])
            batch.left -= e.ended
    order = sorted(stream.batches.values(), key=lambda b: b.j)
    stream.queue = deque(e for b in order for e in b.eps if not e.started)
    pending = {(j, i) for _, j, i in st["due"]}
    going = [e for b in order for e in b.eps if e.started and not e.ended and not e.failed]
    own = [e for e in going if e.mine]  # each process reopens its own episodes
    if own:
        stream.open_jobs.append(stream.jobs.submit(stream.env.open,
                                               [e.b.contexts[e.i] for e in own]))
        opened = stream._wait(stream.open_jobs[-1], "open")
        for e, x in zip(own, opened):
            e.episode, e.failed, e.why = x, bool(x.failed), x.failed
    answered = {e: e.said[:-1] if (e.b.j, e.i) in pending else e.said for e in own}
    for k in range(max((len(a) for a in answered.values()), default=0)):
        eps = [e for e in own if not e.failed and len(answered[e]) > k]
        replies = stream._wait(stream.jobs.submit(stream.env.step, [e.episode for e in eps],
                                              [answered[e][k] for e in eps]))
        stream.replayed += len(eps)
        for e, reply in zip(eps, replies):
            if reply.outcome == SANDBOX_ERROR:  # its next call, or stop, says so
                e.failed, e.why = True, e.episode.failed or "a replayed call failed"
    if going:  # which sessions failed to come back, on every process
        failed, = distributed.from_owners(np.array([e.b.owner_N[e.i] for e in going]),
                                          np.array([e.failed for e in going], np.int32))
        for e, f in zip(going, failed):
            e.failed = bool(f)
    for offset in sorted({o for o, _, _ in st["due"]}):  # counted when first issued
        call(stream, [stream.batches[j].eps[i] for o, j, i in st["due"] if o == offset],
             stream.t + offset, issued=False)
    stream.resumes = [stream.batches[j].eps[i] for j, i in st["resumes"]]



# ---------------------------------------------------------------------- what processes share
def due_now(stream) -> list:
    """The replies appended at this boundary, as (episode, `Seen`): the calls due now and
    those due before and not taken then. Waiting, a call not back whose episode goes on in
    this run is waited for (the devices' idle time); deferring (`Schedule.defer`), and for a
    later run's turn either way, it is left for the first boundary it is back by, and the
    rows go on. `rollout/late_call_share` counts the calls not back when first needed."""
    entries = stream.deferred + stream.due.pop(stream.t, [])
    for e, f in entries:
        if stream.allowed(e) and e.counted != len(e.said):  # first needed now
            e.counted = len(e.said)
            stream.late += f is not None and not f.done()
    # Waiting: for the calls whose episodes go on in this run (a later run's are not needed
    # yet: taken when back, as deferring takes every call).
    block = [not stream.sch.defer and stream.allowed(e) for e, _ in entries]
    replies, stream.deferred = replies_due(stream, entries, block)
    return replies


def call(stream, calls: list, due: int, issued: bool = True) -> None:
    """Each episode's last call handed to the environment, its reply due at boundary `due`
    (`issued`: counted as this run's; a restored stream's calls were the run before's)."""
    stream.issued += len(calls) if issued else 0
    own = [e for e in calls if e.mine]  # another process steps the others
    futures: dict = {}
    if own and stream.jobs.threads == 1:  # one thread: one batch (sessions in parallel)
        f = stream.jobs.submit(stream.env.step, [e.episode for e in own],
                               [e.said[-1] for e in own], calls=len(own))
        futures = {e: item(f, j) for j, e in enumerate(own)}
    elif own:  # each call on its own: a slow one holds up no other
        futures = {e: item(stream.jobs.submit(stream.env.step, [e.episode], [e.said[-1]],
                                              calls=1), 0) for e in own}
    if calls:
        stream.due.setdefault(due, []).extend((e, futures.get(e)) for e in calls)


def chunk_places(got: list) -> tuple:
    """A boundary's chunk read back (`TurnSampler.chunk`'s six places of each part: the
    steps queued ahead of the boundary's pieces, then the rest) as (the rows live in any
    part, the tokens sampled, the rows' live, stop, col and turn start after it)."""
    parts = [got[at:at + 6] for at in range(0, len(got), 6)]
    made = sum(int((col_B - col0_B)[live0_B].sum()) for live0_B, col0_B, _, _, col_B, _ in parts)
    return (np.any([p[0] for p in parts], axis=0), made,
            dict(zip(("live", "stop", "col", "start"), parts[-1][2:])))


def wait_any(stream, needed: list) -> None:
    """No row decodes, and calls `needed` (deferred, their episodes' next turns this run's)
    are what is left to go on: wait until one of this process's is back (another
    process's: its owner waits, this one meets it at the next boundary's all-gather)."""
    own = [f for _, f in needed if f is not None]
    if own and not any(f.done() for f in own):
        t0 = time.perf_counter()
        futures.wait(own, return_when=futures.FIRST_COMPLETED)
        stream.waits["call"] += time.perf_counter() - t0


def replies_due(stream, due: list, block: list) -> tuple[list, list]:
    """The replies of `due` as (episode, `Seen`), and the entries not back (those `block`
    says are waited for). Each process looks at its own episodes' calls and tokenizes their
    replies; every process gets them all, and so appends the same ones."""
    if not due:
        return [], []
    n, o = len(due), stream.s.observation_tokens
    tool_n, outcome_n, len_n, cut_n, back_n = (np.zeros(n, np.int32) for _ in range(5))
    reward_n, ids_n_O = np.zeros(n, np.float32), np.zeros((n, o), np.int32)
    for k, (e, future) in enumerate(due):
        if future is None or not (block[k] or future.done()):  # another process's; not back
            continue
        reply = stream._wait(future)
        back_n[k] = 1
        tool_n[k] = stream.tools.index(reply.tool) if reply.tool in stream.tools else len(
            stream.tools)
        outcome_n[k], reward_n[k] = OUTCOMES.index(reply.outcome), reply.reward
        if reply.outcome != SANDBOX_ERROR:
            ids, cut_n[k] = stream.glue.ids(reply.text, o)
            ids_n_O[k, :len(ids)], len_n[k] = ids, len(ids)
    shared = distributed.from_owners(np.array([e.b.owner_N[e.i] for e, _ in due]), back_n,
                                     tool_n, outcome_n, reward_n, ids_n_O, len_n, cut_n)
    replies, waiting = [], []
    for entry, back, t, out, rw, ids, ln, c in zip(due, *shared):
        if back:
            replies.append((entry[0], Seen(int(t), int(out), float(rw),
                                           ids[:int(ln)].tolist(), int(c))))
        else:
            waiting.append(entry)
    return replies, waiting

def shown_at_reset(stream, take: list, dest: list, obs_B_O, len_B) -> None:
    """What the environment showed at reset (`Episode.observation`, e.g. a workspace's
    listing) of episodes `take`, now in rows `dest`, into their observations; whether
    their sessions opened. Each process's own episodes', shared."""
    m, o = len(take), stream.s.observation_tokens
    room = min(o, stream.r - 1)  # a slot is left for the first turn
    failed_M, len_M, cut_M = (np.zeros(m, np.int32) for _ in range(3))
    ids_M_O = np.zeros((m, o), np.int32)
    for k, e in enumerate(take):
        if not e.mine:
            continue
        x = stream._opened(e)
        failed_M[k] = e.failed
        if x.observation and not e.failed:
            ids, cut_M[k] = stream.glue.ids(x.observation, room)
            ids_M_O[k, :len(ids)], len_M[k] = ids, len(ids)
    failed_M, ids_M_O, len_M, cut_M = distributed.from_owners(
        np.array([e.b.owner_N[e.i] for e in take]), failed_M, ids_M_O, len_M, cut_M)
    for e, row, failed, ids, n, cut in zip(take, dest, failed_M, ids_M_O, len_M, cut_M):
        e.failed |= bool(failed)
        e.b.cut_N[e.i] += cut
        if n:
            obs_B_O[row, :n], len_B[row] = ids[:n], n


def verdicts(batch: Batch, wait: Callable) -> None:
    """Its ended episodes' environment verdicts: each process's own waited for, then every
    process gets all (status and fraction; another process's details are left empty)."""
    for eps, future in batch.finishing:
        for e, v in zip(eps, wait(future)):
            batch.verdicts[e.i] = v
    batch.finishing = []
    block = distributed.my_rows(batch.n)
    batch.verdicts = episodes.gather_verdicts(batch.verdicts[block], block, batch.n)


def no_waits() -> dict:
    """Seconds the driver (and so the devices) waited, by what for: sessions' opens, calls'
    replies, final verdicts (`rollout/wait_*_s`)."""
    return {"open": 0.0, "call": 0.0, "verdict": 0.0}


def new_counts(stream) -> None:
    """A run's counts from zero: waits by kind, prompts prefilled, tokens recomputed, calls
    late and issued, seconds blocked on the devices, reads of them and bytes read."""
    stream.waits, stream.prefills, stream.recomputed = no_waits(), 0, 0
    stream.late, stream.issued, stream.synced, stream.fetched, stream.reads = 0, 0, 0.0, 0, 0


def verdict_json(v) -> Optional[list]:
    return None if v is None else [int(v.status), v.detail, v.fraction,
                                   [list(p) for p in v.parts]]


def verdict_of(x) -> Optional[Verdict]:
    return None if x is None else Verdict(Status(x[0]), x[1], fraction=x[2],
                                          parts=tuple(tuple(p) for p in x[3]))


def close(stream) -> None:
    """Jobs not started are dropped; every job running is waited for; every episode
    opened and not closed is closed."""
    stream.jobs.shutdown()
    leftover = []
    for f in stream.open_jobs:
        if f.cancelled():
            continue
        try:
            leftover += [x for x in f.result() if not x.closed]
        except Exception:  # noqa: BLE001 (an open that raised has nothing to close)
            pass
    if leftover:
        stream.env.close_episodes(leftover)


def record(stream, batch: Batch, steps: int, chunks: int, live_sum: int, wall: float,
           calls: tuple[list, list]) -> Generated:
    """Batch's record once its episodes have all ended (the stream's metrics of its run;
    `calls`: the run's calls' seconds and their waits for a thread, `Timed.since`)."""
    call_s, queued_s = calls
    n = batch.n
    verdicts = [Verdict(Status.SANDBOX_ERROR,
                        f"the episode's sandbox failed: {why(e)}"[:300])
                if e.failed else batch.verdicts[e.i] for e in batch.eps]
    rollout = batch.res._replace(version_B_R=batch.versions())
    turns_N = np.array([e.turns for e in batch.eps], np.int32)
    row = stats(turns_N, batch.calls_N_T_O, stream.tools, batch.reason_N, rollout,
                batch.cut_N, batch.pmask_N_L)
    row["episode/turn_reward_mean"] = float(rollout.turn_rewards_B_R.sum() / n)
    # Tokens this run made (a carried batch's first turns were earlier runs').
    row.update(episodes.rollout_stats(sum(stream.waits.values()), wall, stream.made, steps,
                                      stream.b, call_s))
    row.update({f"rollout/wait_{kind}_s": s for kind, s in stream.waits.items()})
    host_s = wall - stream.synced - sum(stream.waits.values())  # neither devices nor waits
    row.update({"stream/chunks": float(chunks), "rollout/device_s": stream.synced,
                "rollout/host_ms_per_chunk": 1e3 * host_s / max(chunks, 1),
                "rollout/host_kb_per_chunk": stream.fetched / 1024 / max(chunks, 1),
                "rollout/host_reads_per_chunk": stream.reads / max(chunks, 1),
                "stream/live_rows_mean": live_sum / max(chunks, 1),
                "stream/prefills_per_prompt": stream.prefills / max(-(-n // stream.g), 1),
                "stream/recomputed_tokens_per_episode": stream.recomputed / n,
                "stream/carried_episodes": float(carried(stream)),
                "stream/calls_issued": float(stream.issued),
                "rollout/late_call_share": stream.late / max(stream.issued, 1),
                # > 0: calls waited for a thread (rollout.stream.env_threads caps them)
                "rollout/env_call_queued_p99_s": float(np.percentile(queued_s or [0.0], 99))})
    return Generated(rollout, list(batch.finals), verdicts, {**row, **stream.env.stats()})


def item(future: Future, j: int) -> Future:
    """A future of element j of `future`'s list."""
    out: Future = Future()

    def done(f: Future):
        try:
            out.set_result(f.result()[j])
        except Exception as e:  # noqa: BLE001 (the caller's wait re-raises it)
            out.set_exception(e)
    future.add_done_callback(done)
    return out
