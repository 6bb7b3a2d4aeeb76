"""A pool of verifier worker processes with hard deadlines.

`VerifierPool(kind, workers, timeout_s, mode)` keeps `workers` worker processes, sends each a
job at a time and waits on all of them with `select`. Trusted graders (kind `math`) run in
plain subprocesses (`python -m MODULE KIND`, the module its kind registered, mode `none`). Untrusted programs
(kind `code`) run in the bubblewrap sandbox (`bwrap.py`), in one of two modes with the same
containment: `forkserver` (a long-lived sandboxed worker forks a child per job; recycled after
`recycle_after` jobs or any limit violation) or `fresh` (one sandbox per job).

A worker says `{"ready": 1}` once it has started (bubblewrap, Python, its imports), and a
forkserver worker says it again after each job's cleanup: only then is it sent a job, so a
job's deadline (`timeout_s`) measures the candidate, never a slow worker start on a loaded
machine nor the previous job's leftovers. Replies are read from the raw pipe into a buffer per
worker, so a partial line never blocks the loop and two lines in one read are both seen. A worker that does not become ready within `start_timeout_s` is
replaced; when workers keep failing to start, the batch's waiting jobs are SANDBOX_ERROR (an
infrastructure failure). A worker that misses its job's deadline is killed (SIGKILL) and
replaced, and the job is a TIMEOUT; a worker that dies is replaced and its job retried once on the fresh
worker, then reported as SANDBOX_ERROR (an infrastructure failure: the loop masks it out of the
loss, never scores it), unless the sandbox's cgroup counted an OOM kill during the job: then it
is the candidate's MEMORY_LIMIT. A whole call also has a deadline (`batch_timeout_s`), shared
fairly: a job's clock runs to its own deadline or, when shorter, to its share of what is left
of the batch's time (`share`), so a job that uses more than its share is its own TIMEOUT and
the jobs after it still get theirs; only a job that never starts before the batch's deadline
(workers that cannot start: capacity) is masked (SANDBOX_ERROR). Verdicts of identical jobs
are cached (never a TIMEOUT).

Every host function that reads candidate-controlled data (wiring a job, comparing outputs)
runs behind the verdict firewall (`firewall.py`, `codecs.py`: `wire` and `verdict`): `verify`
never raises because of what a candidate wrote.

Every job carries an id that its reply echoes: a reply for another job (a worker out of step,
e.g. after a batch aborted by an exception) replaces that worker instead of being read as this
job's verdict, and a batch that raises replaces every worker it left busy. Reading and parsing a
reply count inside the job's deadline; what the host parses is bounded by the worker (a 1 MiB
result, 100 levels of nesting), and a reply that still fails to parse is treated as a dead
worker, never raised to the caller. `close()` kills each worker's whole process group and
cgroup, and retries cgroups that were still busy until they are gone.

No JAX import: the pool never touches the trainer's devices.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import os
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional, Sequence

from rlvr_jax.types import Status, Verdict
from rlvr_jax.sandbox import bwrap, codecs
from rlvr_jax.sandbox.cgroup import Cgroup
from rlvr_jax.sandbox.trainer_python import MOUNT_POINTS
from rlvr_jax.sandbox.codecs import verdict, wire  # the firewall's side of a reply


# A worker's reply is one line; past this without a newline it is garbled (the worker bounds
# what it sends: a 1 MiB result, 2000 characters of stdout, escapes included).
MAX_LINE_BYTES = 16 << 20


class _Worker:
    """One worker process and what the host knows of it. States: `starting` (until its first
    `{"ready": 1}`), `ready` (idle), `busy` (a job sent), `cleaning` (a sandboxed forkserver
    worker after its reply, until it says ready again: the previous job's cleanup never runs
    on the next job's clock)."""

    def __init__(self, kind: str, mode: str, cgroup=None):
        if mode == "none":
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            self.proc = subprocess.Popen(
                [sys.executable, "-m", codecs.trusted_worker(kind), kind], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0, env=env)
        else:
            codec = codecs.codec(kind)
            self.proc = bwrap.spawn(once=mode == "fresh", cgroup=cgroup,
                                    python=getattr(codec, "PYTHON", None),
                                    tmpfs=getattr(codec, "TMPFS", ()))
        self.mode, self.cgroup = mode, cgroup
        self.fd = self.proc.stdout.fileno()
        self.buf = bytearray()
        self.jobs_done = 0
        self.state = "starting"
        self.since = time.monotonic()  # when it entered its state
        self.oom_kills = 0  # the cgroup's OOM-kill count when last read

    def read_lines(self) -> tuple[list[bytes], bool]:
        """The complete lines available now (select said readable), and whether the worker's
        stdout has closed. Never blocks on a partial line."""
        chunk = os.read(self.fd, 1 << 20)
        self.buf += chunk
        *lines, rest = self.buf.split(b"\n")
        self.buf = bytearray(rest)
        if len(self.buf) > MAX_LINE_BYTES:
            lines.append(b"<garbled: an over-long line>")
            self.buf = bytearray()
        return lines, not chunk

    def exit_code(self) -> Optional[int]:
        """Its exit code once its stdout has closed (it may take a moment to be reaped)."""
        try:
            return self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return None

    def send(self, job: dict) -> None:
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()

    def new_oom_kills(self) -> int:
        """OOM kills in this worker's cgroup since the last call (0 without a cgroup)."""
        if self.cgroup is None:
            return 0
        total = self.cgroup.oom_kills()
        new, self.oom_kills = total - self.oom_kills, total
        return max(new, 0)

    def kill(self) -> None:
        if self.mode == "none":
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
        else:
            bwrap.kill(self.proc)  # its whole process group
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


MODES = ("none", "forkserver", "fresh")
READY = {"ready": 1}


class VerifierPool:
    def __init__(self, kind: str, workers: int = 2, timeout_s: float = 10.0,
                 batch_timeout_s: Optional[float] = None, cache_size: int = 100_000,
                 mode: Optional[str] = None, recycle_after: int = 1000,
                 memory_mb_per_sandbox: int = 2048, pids_per_sandbox: int = 128,
                 start_timeout_s: float = 60.0, cleanup_timeout_s: float = 10.0):
        sandboxed = codecs.codec(kind) is not None
        if not sandboxed and codecs.trusted_worker(kind) is None:
            raise ValueError(f"unknown verifier kind {kind!r} (registered: "
                             f"{', '.join(codecs.known()) or 'none'}; the graders' kinds are "
                             "registered by importing rlvr_jax.verify, an environment's by "
                             "its module)")
        mode = mode or ("forkserver" if sandboxed else "none")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
        if getattr(codecs.codec(kind), "TMPFS", ()) and mode == "forkserver":
            mode = "fresh"  # its extra directories are not emptied between jobs
        if sandboxed and mode == "none":
            raise ValueError(f"kind {kind!r} runs untrusted code: it needs a sandbox mode "
                             "(forkserver or fresh), never none")
        if mode != "none":
            bwrap.check_available()  # a clear error now, never a silent fallback
            Cgroup.remove_stale()  # a killed trainer's, once per process
        self._python = getattr(codecs.codec(kind), "PYTHON", None) if mode != "none" else None
        if self._python is not None:
            self._python.binds()  # an interpreter the sandbox cannot show: refused now
            MOUNT_POINTS.hold()
        self.kind, self.mode, self.timeout_s = kind, mode, timeout_s
        self.batch_timeout_s, self.recycle_after = batch_timeout_s, recycle_after
        self.start_timeout_s, self.cleanup_timeout_s = start_timeout_s, cleanup_timeout_s
        self._cgroups = []  # of live workers, and of replaced ones not yet removed
        self._cg_made = 0  # names must never repeat: a replaced worker's cgroup may outlive it
        self._cg_args = (memory_mb_per_sandbox << 20, pids_per_sandbox)
        self._workers = [self._new_worker() for _ in range(workers)]
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._cache_size = cache_size
        self._executor = ThreadPoolExecutor(1)
        # One batch at a time on the workers: a stream's environment threads may verify at
        # once (two batches interleaved on one worker set mixed their lines and clocks).
        self._batch = threading.Lock()
        self._next_id = 0
        self.restarts = 0

    # ------------------------------------------------------------------ public
    def verify(self, jobs: Sequence[dict]) -> list[Verdict]:
        """One verdict per job, in order; returns within the batch deadline. Never raises
        because of what a candidate wrote (firewall.py). Thread-safe: concurrent calls run
        one after another."""
        with self._batch:
            return self._verify(jobs)

    def _verify(self, jobs: Sequence[dict]) -> list[Verdict]:
        results: list[Optional[Verdict]] = [None] * len(jobs)
        keys = [_cache_key(j) for j in jobs]
        pending = collections.deque()
        for i, k in enumerate(keys):
            if k is not None and k in self._cache:
                self._cache.move_to_end(k)
                results[i] = self._cache[k]
            else:
                pending.append((i, 0))
        self._run(jobs, pending, results)
        for k, v in zip(keys, results):
            if k is not None and v.status not in (Status.SANDBOX_ERROR, Status.TIMEOUT):
                self._cache[k] = v
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return results  # type: ignore[return-value]

    def submit(self, jobs: Sequence[dict]) -> Future:
        """Non-blocking: `.result()` returns what `verify(jobs)` would."""
        return self._executor.submit(self.verify, list(jobs))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        for w in self._workers:
            w.kill()
        self._workers = []
        self._cgroups = [cg for cg in self._cgroups if not cg.remove()]
        if self._python is not None:
            self._python = None
            MOUNT_POINTS.release()  # the last pool using them removes the folder

    @property
    def containment(self) -> str:
        """Which whole-tree bound is active (see bwrap.py)."""
        return self._cgroups[0].kind if self._cgroups else "none (not sandboxed)"

    def __enter__(self) -> "VerifierPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ scheduling
    def _new_worker(self) -> _Worker:
        cgroup = None
        if self.mode != "none":
            self._cg_made += 1
            cgroup = Cgroup(f"{os.getpid()}_{id(self)}_{self._cg_made}", *self._cg_args)
            self._cgroups.append(cgroup)
        return _Worker(self.kind, self.mode, cgroup)

    def _replace(self, w: _Worker) -> _Worker:
        w.kill()
        if w.cgroup is not None and w.cgroup.remove(timeout_s=0.5):
            self._cgroups.remove(w.cgroup)  # else kept, and removed again at close
        self.restarts += 1
        fresh = self._new_worker()
        self._workers[self._workers.index(w)] = fresh
        return fresh

    def _run(self, jobs, pending: collections.deque, results: list) -> None:
        busy: dict = {}  # worker -> _Running
        try:
            self._schedule(jobs, pending, results, busy)
        except BaseException:
            # Aborted with replies in flight: those workers are out of step. Replace them so
            # the next batch never reads this one's replies.
            for w in list(busy):
                self._replace(w)
            raise

    def _schedule(self, jobs, pending: collections.deque, results: list, busy: dict) -> None:
        start = time.monotonic()
        batch_deadline = start + self.batch_timeout_s if self.batch_timeout_s else float("inf")
        n_workers = len(self._workers)

        def clock(run: "_Running") -> None:
            """Start a job's clock, with its allowance: its own deadline, or its fair share of
            what is left of the batch's time when that is shorter (`share`)."""
            run.sent = time.monotonic()
            run.allow = share(self.timeout_s, batch_deadline - run.sent, n_workers,
                              len(pending) + len(busy))
        # Free to take a job: ready workers, and cleaning ones (the job waits in the worker's
        # pipe and its clock starts at the worker's next ready line, so the cleanup overlaps
        # the host's work without running on the job's clock).
        idle = collections.deque(w for w in self._workers if w.state in ("ready", "cleaning"))
        waiting = [w for w in self._workers if w.state in ("starting", "cleaning")]
        start_failures, last_failure = 0, ""

        def restart(w: _Worker) -> None:
            for queue in (idle, waiting):
                if w in queue:
                    queue.remove(w)
            waiting.append(self._replace(w))

        def requeue(w: _Worker) -> None:
            """A job queued behind `w`'s cleanup never started: it goes back, uncharged."""
            if w in busy:
                run = busy.pop(w)
                pending.appendleft((run.i, run.attempt))

        def on_line(w: _Worker, line: Optional[bytes]) -> None:
            """One line from `w` (None: its stdout closed)."""
            nonlocal start_failures, last_failure
            try:  # a line that is not one JSON object counts as a dead worker
                msg = json.loads(line) if line else None
            except (ValueError, RecursionError, MemoryError):
                msg = None
            if w.state in ("starting", "cleaning"):
                waiting.remove(w)
                if msg == READY:
                    if w in busy:  # a job waited for this cleanup: its clock starts now
                        clock(busy[w])
                        w.state = "busy"
                    else:
                        if w.state == "starting":
                            idle.append(w)
                        w.state = "ready"
                    return
                if w.state == "starting":
                    start_failures += 1
                    last_failure = (f"exit code {w.exit_code()}" if line is None
                                    else "a malformed first line")
                # A worker that died while cleaning up after a job (its cleanup over budget,
                # see box_worker.py) is replaced; a job queued behind it never started and
                # goes to another worker, uncharged.
                requeue(w)
                restart(w)
                return
            run = busy.pop(w)
            i, attempt, sent, job_id = run.i, run.attempt, run.sent, run.job_id
            if isinstance(msg, dict) and "status" in msg and msg.get("id") != job_id:
                # Another job's reply: this worker is out of step. A fresh one retries
                # the job; the retry is not counted against it (not its failure).
                restart(w)
                pending.appendleft((i, attempt))
                return
            oom = w.new_oom_kills()
            if isinstance(msg, dict) and "status" in msg and (
                    time.monotonic() > sent + run.allow):
                # Reading and parsing the reply count inside the job's deadline.
                results[i] = Verdict(Status.TIMEOUT, "reply read past the job deadline"
                                     + run.why_short(self.timeout_s), time.monotonic() - sent)
                restart(w)
                return
            if isinstance(msg, dict) and "status" in msg:
                if oom and msg.get("status") != "ok":
                    # The kernel's OOM killer ran in this sandbox's cgroup during the job:
                    # only the candidate's processes (or memory it left in the sandbox) can
                    # fill it, so the failure is the candidate's memory limit.
                    v = Verdict(Status.MEMORY_LIMIT, f"out of memory ({oom} OOM kill(s) in "
                                                     "the sandbox's cgroup)")
                else:
                    v = verdict(self.kind, jobs[i], msg)
                results[i] = dataclasses.replace(v, latency_s=time.monotonic() - sent)
                w.jobs_done += 1
                # A limit hit may leave the worker in a bad state: recycle it. A syntax or
                # runtime error in the candidate is an ordinary answer.
                violation = oom or msg.get("status") in ("timeout", "memory_limit",
                                                         "output_limit", "sandbox_error")
                if self.mode == "fresh" or (self.mode == "forkserver" and (
                        violation or w.jobs_done >= self.recycle_after)):
                    restart(w)  # fresh: one sandbox per job
                elif self.mode == "forkserver":
                    w.state, w.since = "cleaning", time.monotonic()  # ready again after it
                    waiting.append(w)
                    idle.append(w)
                else:
                    w.state = "ready"
                    idle.append(w)
                return
            if oom:
                # The worker itself was the OOM killer's choice (memory charged to the cgroup
                # that no process holds): the candidate's doing, never retried or masked.
                results[i] = Verdict(Status.MEMORY_LIMIT, f"out of memory: the sandbox was "
                                                          f"OOM-killed ({oom} kill(s))",
                                     time.monotonic() - sent)
                restart(w)
                return
            code = w.exit_code() if line is None else w.proc.poll()
            why = "died" if line is None else "sent a malformed reply"
            restart(w)
            if attempt == 0:
                pending.appendleft((i, 1))  # retried once, on a fresh worker
            else:
                results[i] = Verdict(Status.SANDBOX_ERROR,
                                     f"worker {why} twice (exit code {code})",
                                     time.monotonic() - sent)

        while pending or busy:
            while pending and idle:
                w = idle.popleft()
                i, attempt = pending.popleft()
                wired, refused = wire(self.kind, jobs[i])
                if refused is not None:  # the candidate's completion broke the host's parser
                    results[i] = refused
                    idle.appendleft(w)
                    continue
                self._next_id += 1
                try:
                    w.send(dict(wired, id=self._next_id))
                except (BrokenPipeError, OSError):
                    pending.appendleft((i, attempt))
                    restart(w)
                    continue
                busy[w] = _Running(i, attempt, self._next_id)
                if w.state != "cleaning":  # else queued: the clock starts at its ready line
                    w.state = "busy"
                    clock(busy[w])
            if not (pending or busy):
                break
            now = time.monotonic()
            next_deadline = min([run.sent + run.allow for run in busy.values()
                                 if run.sent is not None]
                                + [w.since + self._wait_limit(w) for w in waiting]
                                + [batch_deadline])
            by_fd = {w.fd: w for w in [*busy, *waiting]}
            # No clock running (every busy worker still cleaning, no batch timeout): wait
            # for a line; select refuses an infinite timeout.
            ready, _, _ = select.select(list(by_fd), [], [], None if next_deadline == math.inf
                                        else max(0.0, next_deadline - now))
            for fd in ready:
                w = by_fd[fd]
                lines, closed = w.read_lines()
                for line in lines:
                    if w not in busy and w not in waiting:
                        break  # replaced on an earlier line of this read
                    on_line(w, line)
                if closed and (w in busy or w in waiting):
                    on_line(w, None)
            now = time.monotonic()
            for w in [w for w in waiting if now >= w.since + self._wait_limit(w)]:
                if w.state == "starting":
                    start_failures += 1
                    last_failure = f"not ready after {self.start_timeout_s:g} s"
                requeue(w)
                restart(w)
            if pending and start_failures > 2 * len(self._workers):
                # The sandbox itself is broken: the waiting jobs are the infrastructure's
                # failure, never the candidates'.
                while pending:
                    i, _ = pending.popleft()
                    results[i] = Verdict(Status.SANDBOX_ERROR,
                                         f"workers failed to start {start_failures} times "
                                         f"(last: {last_failure})")
            for w, run in list(busy.items()):
                i, sent = run.i, run.sent
                if sent is None:  # queued behind a cleanup: not started, not timed
                    if now >= batch_deadline:
                        busy.pop(w)
                        restart(w)  # the job sits in its pipe: never let it run later
                        results[i] = Verdict(Status.SANDBOX_ERROR,
                                             "not started before the batch deadline")
                    continue
                if now >= sent + run.allow:
                    busy.pop(w)
                    restart(w)
                    results[i] = Verdict(Status.TIMEOUT, "killed at the job deadline"
                                         + run.why_short(self.timeout_s), now - sent)
                elif now >= batch_deadline:
                    # Cut short by the whole call's deadline before its own: the candidate
                    # had less than its time, so this is no verdict on it (masked).
                    busy.pop(w)
                    restart(w)
                    results[i] = Verdict(Status.SANDBOX_ERROR, "cut at the batch deadline "
                                         f"after {now - sent:.2f} s (before its own)", now - sent)
            if now >= batch_deadline:
                while pending:  # never ran: capacity, not the candidate's doing (masked)
                    i, _ = pending.popleft()
                    results[i] = Verdict(Status.SANDBOX_ERROR,
                                         "not started before the batch deadline")

    def _wait_limit(self, w: _Worker) -> float:
        return self.start_timeout_s if w.state == "starting" else self.cleanup_timeout_s


@dataclasses.dataclass
class _Running:
    """A job sent to a worker: its clock starts when the worker is ready (`sent`), with its
    allowance (`allow`, seconds)."""

    i: int  # its index in the batch
    attempt: int
    job_id: int
    sent: Optional[float] = None
    allow: float = 0.0

    def why_short(self, timeout_s: float) -> str:
        return ("" if self.allow >= timeout_s else
                f" ({self.allow:.2f} s: its share of the batch's time, not {timeout_s:g} s)")


MIN_SHARE_S = 0.1


def share(timeout_s: float, left_s: float, workers: int, unfinished: int) -> float:
    """A job's allowance when its clock starts: its own deadline `timeout_s`, or, when
    shorter, its fair share of the batch's time left: `left_s` x workers / the jobs not yet
    finished (this one, those running, those waiting), never past the batch's deadline.

    Why: a batch deadline that simply cut whatever was running or waiting masked honest
    batch-mates (their `sandbox_error` is out of the loss) because of other samples' loops,
    and masked the loops themselves, so a policy drifting into loops escaped its penalty. With
    shares, each job's own deadline comes before the batch's: a job that uses more than its
    share is its own TIMEOUT, and the jobs after it still get theirs (if every job took its
    whole share, W workers would finish the batch just at its deadline). A job that never
    starts before the batch's deadline (workers slow to start: capacity) is still masked."""
    left_s = max(left_s, 0.0)
    fair = left_s * min(1.0, workers / max(unfinished, 1))
    # Never less than MIN_SHARE_S: a job that starts when little is left (the batch's time
    # spent on restarts and slow starts, not on this sample) is not scored for the lack; if
    # the batch's deadline comes first, it is cut there and masked.
    return min(timeout_s, max(fair, MIN_SHARE_S))


def _cache_key(job: dict) -> Optional[str]:
    """The verdict cache's key: a digest of the job, whose text (the completion, a code task's
    test inputs) can be megabytes, 100k of them kept; None (not cached) for a job that does
    not serialise."""
    try:
        return hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()
    except (TypeError, ValueError, RecursionError):
        return None


def child_processes() -> list[tuple[int, str]]:
    """(pid, state letter) of this process's children, from /proc: for leak checks (a 'Z'
    state is a zombie)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            out.append((int(pid), fields[0]))
    return out
