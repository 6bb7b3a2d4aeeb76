"""Sessions: one long-lived sandbox per episode, where the episode's state lives.

A session is a bubblewrap sandbox with the same containment as verification (bwrap.py: no
network, its own pid namespace, unprivileged uid, seccomp, a cgroup bounding its whole tree
in memory and pids where the host allows, rlimits on the world) and its own size-capped
writable tmpfs, /tmp, the workspace. Its pid 1 is session_server.py; the episode's *world*
(the environment's tool module, run once at open, then every call) is its child. Nothing is
shared between sessions: two rows of one group get two sandboxes.

    pool = SessionPool(Spec(tools_source, ("python",)), SessionLimits(), max_live=64)
    sessions = pool.open([context] * 4)                      # concurrently
    replies = pool.call(sessions, [("python", {"code": "x = 2"}), ...])    # concurrently
    files = pool.collect(sessions, [("answer.txt",)] * 4)   # the final state, read out
    pool.close(sessions)                                    # idempotent, every path

Start-up. A sandbox (bwrap, the system interpreter, the environment's module loaded into a
forked world) takes tens of milliseconds to start, so the pool keeps sandboxes started ahead
(spares: loaded, no episode's state in them); an open takes one and sends it the episode's
`setup` context. Spares start when sessions close, on the pool's own thread (the caller and
the update go on), up to the largest batch opened or announced (`keep_ready`: a stream's,
streaming.py), `spares` at least.

What is whose. Everything the world does (loops, exits, runs out of memory, kills itself,
garbles its pipe) is the agent's doing: the server reports it (`timeout`, `died`,
`restarted`) and the environment turns it into an observation. Only a session that fails by
itself (its sandbox will not start, its server stops answering) is `sandbox_error`, which
masks the episode. Budgets: per call (`call_s`, server-side, with the host's own deadline
behind it), per episode (`episode_s`, the host's wall clock from open), per world
(`cpu_s`, memory, processes, file size, open files).

Live sessions are capped per process (`max_live`, across pools): each costs one bwrap, one
pid-1 server and one world, about 20-30 MB of host memory for a plain REPL world
(experiments/bench/sessions.py measures it). `close` kills the sandbox's process group and
removes its cgroup; `leaked()` counts sessions of this process still alive after close
(must be 0). No JAX import.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import select
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Sequence

from rlvr_jax.sandbox import bwrap
from rlvr_jax.sandbox.cgroup import Cgroup

SANDBOX_ERROR = "sandbox_error"
START_TIMEOUT_S = 30.0  # a sandbox that is not ready by then failed (infrastructure)
REPLY_MARGIN_S = 2.0  # the host's deadline past the server's own for a reply


@dataclasses.dataclass(frozen=True)
class SessionLimits:
    call_s: float = 5.0  # one call's wall clock (server-side; then SIGINT, then a restart)
    episode_s: float = 300.0  # an episode's wall clock, from open (host-side)
    start_s: float = 10.0  # the world's start: the tool module and its setup
    memory_mb: int = 512  # the world's address space (RLIMIT_AS, per process)
    cpu_s: int = 60  # the world's CPU seconds (a restarted world starts again)
    processes: int = 32  # RLIMIT_NPROC of the world
    file_mb: int = 16  # largest file the world can write
    open_files: int = 64
    output_bytes: int = 16384  # a call's stdout and stderr kept (the rest is cut)
    workspace_mb: int = 64  # the /tmp tmpfs's cap
    session_memory_mb: int = 1024  # the whole sandbox's memory (cgroup, where available)
    session_pids: int = 64  # the whole sandbox's processes (cgroup, where available)
    file_bytes: int = 1 << 20  # a collected file's cap
    total_bytes: int = 4 << 20  # all collected files' cap

    def server(self) -> dict:  # what the session's server enforces (the rest: the host)
        host = ("episode_s", "workspace_mb", "session_memory_mb", "session_pids")
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in host}


@dataclasses.dataclass(frozen=True)
class Spec:
    """What every world of a pool is: the environment module's source (stdlib only: it runs
    under the sandbox's system interpreter) and the tools a call may name. An episode's
    `setup(**context)` arguments come with `open`."""

    tools: str
    names: tuple[str, ...]
    workspace: str = "/tmp"  # its writable directory (another top-level one gets a tmpfs)


class Session:
    """One sandbox: `state` is spare -> open -> closed (or failed: its `error` says why)."""

    def __init__(self, proc: Optional[subprocess.Popen], cgroup: Optional[Cgroup],
                 error: str = ""):
        """`proc` None: a sandbox that could not start (`error` says why)."""
        self.proc, self.cgroup = proc, cgroup
        self.fd = proc.stdout.fileno() if proc is not None else -1
        self.buf, self.error = bytearray(), error
        self.state = "starting" if proc is not None else "failed"
        self.counted = False  # in the live count (an opened session's, until closed)
        self.deadline = float("inf")  # the episode's wall clock, set at open
        self.observation = None  # what the episode's setup returned (its first observation)
        self._next = 0

    def send(self, msg: dict) -> int:
        self._next += 1
        self.proc.stdin.write((json.dumps(dict(msg, id=self._next)) + "\n").encode())
        self.proc.stdin.flush()
        return self._next

    def lines(self) -> tuple[list[bytes], bool]:
        chunk = os.read(self.fd, 1 << 20)
        self.buf += chunk
        *lines, rest = self.buf.split(b"\n")
        self.buf = bytearray(rest)
        return lines, not chunk

    def fail(self, why: str) -> None:
        self.state, self.error = "failed", why


class SessionPool:
    """Sessions of this process; the live count is per process. Thread-safe: several threads
    may open, call, collect and close at once, each on sessions of its own (a stream's
    environment threads, streaming.py); the pool's books (spares, sessions made, counts)
    are kept under a lock, a session's pipes are read only by the thread using it."""

    _live = 0  # sessions of this process not yet closed, every pool's
    _lock = threading.Lock()

    def __init__(self, spec: Spec, limits: SessionLimits = SessionLimits(), *,
                 max_live: int = 64, spares: int = 2):
        bwrap.check_available()
        Cgroup.remove_stale()
        self.spec, self.limits, self.max_live, self.spares = spec, limits, max_live, spares
        self._books = threading.RLock()  # _spares, _all, _made, _want, counts, samples
        self._spares: list[Session] = []
        self._all: list[Session] = []  # every session made and not yet reaped
        self._made = 0
        self._want = 0  # the largest batch opened so far (or announced: `keep_ready`)
        self._starting = 0  # spares being spawned by a refill, not yet in _spares
        self._down = False  # shut down: a refill in flight closes what it made
        self._refiller = ThreadPoolExecutor(1, thread_name_prefix="spares")  # after a close
        self.samples = {"start_s": [], "call_s": []}
        self.counts = {"opened": 0, "failed": 0, "calls": 0, "peak": 0}
        self._refill()
        self._check_loads()

    # ------------------------------------------------------------------ lifecycle
    def open(self, contexts: Sequence[dict]) -> list[Session]:
        """A session per `setup` context, opened concurrently. A session that fails to start is
        returned failed (`state == "failed"`, `error` says why): the caller masks its
        episode. Raises ValueError if the live cap would be passed (a configuration error:
        more rows per process than `max_live`)."""
        with SessionPool._lock:
            if SessionPool._live + len(contexts) > self.max_live:
                raise ValueError(f"{len(contexts)} sessions would pass the live-session cap "
                                 f"({SessionPool._live} live, max_live={self.max_live}): "
                                 "raise env.max_live_sessions or lower the rows per process")
            SessionPool._live += len(contexts)
        t0 = time.monotonic()
        # Spares grow to the largest batch opened: the next batch of that size opens from
        # ready sandboxes (each spare costs its memory while it waits: bench/sessions.py).
        with self._books:
            self._want = max(self._want, len(contexts))
            take = min(len(contexts), len(self._spares))
            sessions, self._spares = self._spares[:take], self._spares[take:]
        sessions += [self._spawn() for _ in range(len(contexts) - take)]
        for s in sessions:
            s.counted = True
        self._await_ready(sessions, t0 + START_TIMEOUT_S)
        msgs = [{"op": "open", "context": dict(c)} for c in contexts]
        replies = self._exchange(sessions, msgs, self.limits.start_s + REPLY_MARGIN_S)
        now = time.monotonic()
        for s, r in zip(sessions, replies):
            if s.state == "failed":
                continue
            if r.get("status") != "ok":
                self._kill(s, f"the environment's setup failed: {r.get('detail', r)}")
                continue
            s.state, s.deadline = "open", now + self.limits.episode_s
            s.observation = r.get("observation")
        with self._books:
            self.samples["start_s"] += [now - t0] * sum(s.state == "open" for s in sessions)
            self.counts["opened"] += len(sessions)
            self.counts["peak"] = max(self.counts["peak"], self.live)
            self.counts["failed"] += sum(s.state == "failed" for s in sessions)
        return sessions

    def call(self, sessions: Sequence[Session], calls: Sequence[tuple[str, dict]]) -> list[dict]:
        """One call per session, all at once: each reply is the server's (status ok /
        timeout / died, with value or error, stdout, restarted), or {"status":
        "sandbox_error"} for a session that failed, or {"status": "episode_limit"} past the
        episode's wall clock."""
        t0 = time.monotonic()
        out: list[Optional[dict]] = [None] * len(sessions)
        live, msgs = [], []
        for i, (s, (tool, arguments)) in enumerate(zip(sessions, calls)):
            if s.state != "open":
                out[i] = {"status": SANDBOX_ERROR, "detail": s.error or f"session {s.state}"}
            elif time.monotonic() > s.deadline:
                out[i] = {"status": "episode_limit"}
            else:
                live.append(i)
                msgs.append({"op": "call", "tool": tool, "arguments": arguments})
        wait = self.limits.call_s + self.limits.start_s + REPLY_MARGIN_S  # a restart included
        for i, r in zip(live, self._exchange([sessions[i] for i in live], msgs, wait)):
            out[i] = r
        with self._books:
            self.counts["calls"] += len(live)
            self.samples["call_s"].append(time.monotonic() - t0)
        return out  # type: ignore[return-value]

    def collect(self, sessions: Sequence[Session], paths: Sequence[Sequence[str]]
                ) -> list[Optional[dict]]:
        """The declared files of each open session ({path: bytes}; a missing, non-regular
        or over-cap file is absent), read after every process of its world is dead; None
        for a session that failed."""
        live = [i for i, s in enumerate(sessions) if s.state == "open"]
        replies = self._exchange([sessions[i] for i in live],
                                 [{"op": "collect", "paths": list(paths[i])} for i in live],
                                 START_TIMEOUT_S)
        out: list[Optional[dict]] = [None] * len(sessions)
        for i, r in zip(live, replies):
            if r.get("status") == "ok":
                try:
                    out[i] = {p: base64.b64decode(v) for p, v in r["files"].items()}
                except (ValueError, TypeError, KeyError, AttributeError):
                    out[i] = None
        return out

    def close(self, sessions: Sequence[Session]) -> None:
        """Kill each session's sandbox and remove its cgroup; idempotent. Every sandbox is
        signalled first, so their teardowns overlap."""
        self._close(sessions)
        with self._books:  # new spares start now on the pool's thread, off the caller's clock
            if not self._down:
                self._refiller.submit(self._refill)

    def keep_ready(self, count: int) -> None:
        """Keep `count` sandboxes started ahead from now on (a stream's batch, announced)."""
        with self._books:
            self._want = max(self._want, count)
        self._refill()

    def _close(self, sessions: Sequence[Session]) -> None:
        todo = [s for s in sessions if s.state != "closed"]
        for s in todo:
            if s.proc is not None:
                bwrap.signal_group(s.proc)
        for s in todo:
            self._kill(s, s.error)
            s.state = "closed"

    def shutdown(self) -> None:
        """Close every session of this pool, spares included; no spares start after it."""
        with self._books:
            self._down = True
            every = list(self._all)
        self._refiller.shutdown(wait=True, cancel_futures=True)  # a refill in flight ends
        self.close(every)
        with self._books:
            self._spares = []

    def leaked(self) -> int:
        """Sessions this pool closed whose sandbox process is still alive (must be 0)."""
        with self._books:
            every = list(self._all)
        return sum(s.state == "closed" and s.proc.poll() is None for s in every)

    @property
    def live(self) -> int:
        with self._books:
            return sum(s.state == "open" for s in self._all)

    def stats(self) -> dict:
        """Since the last call: the most sessions live at once, sessions opened, the share
        that failed (infrastructure), those left alive after close (must be 0), session start
        and call round-trip latency (p50 / p99 seconds)."""
        import numpy as np

        with self._books:
            counts, samples = self.counts, self.samples
            self.samples = {k: [] for k in self.samples}
            self.counts = {k: 0 for k in self.counts}
        row = {"session/live_peak": float(counts["peak"]),
               "session/opened": float(counts["opened"]),
               "session/failure_rate": counts["failed"] / max(counts["opened"], 1),
               "session/leaked": float(self.leaked())}
        for k, xs in samples.items():
            if xs:
                row[f"session/{k[:-2]}_p50_s"] = float(np.percentile(xs, 50))
                row[f"session/{k[:-2]}_p99_s"] = float(np.percentile(xs, 99))
        return row

    # ------------------------------------------------------------------ internals
    def _spawn(self) -> Session:
        with self._books:
            self._made += 1
            made = self._made
        lim = self.limits
        cgroup = Cgroup(f"{os.getpid()}_{id(self)}_s{made}",
                              lim.session_memory_mb << 20, lim.session_pids)
        try:
            extra = () if self.spec.workspace == "/tmp" else (self.spec.workspace,)
            proc = bwrap.spawn(once=False, cgroup=cgroup, tmp_mb=lim.workspace_mb, session=True,
                               tmpfs=extra)
        except OSError as e:
            cgroup.remove(timeout_s=0.5)
            return Session(None, None, f"could not start: {e}")
        s = Session(proc, cgroup)
        with self._books:
            self._all.append(s)
        try:  # the module to load: read by the server as soon as it starts
            s.proc.stdin.write((json.dumps({"tools": self.spec.tools,
                                            "names": list(self.spec.names),
                                            "workspace": self.spec.workspace,
                                            "limits": self.limits.server()}) + "\n").encode())
            s.proc.stdin.flush()
        except OSError:
            self._kill(s, "the sandbox's pipe closed")
        return s

    def _check_loads(self) -> None:
        """The environment's module must load in a session: a module that raises there is
        one clear error now, never a masked episode per row."""
        if not self._spares:
            return
        self._await_ready(self._spares[:1], time.monotonic() + START_TIMEOUT_S)
        first = self._spares[0]
        if first.state == "failed" and first.error.startswith("the environment's module"):
            self.shutdown()
            raise ValueError(first.error)

    def _refill(self) -> None:
        # Started outside the lock: a refill of many holds up no `open` of ready spares.
        with self._books:
            self._all = [s for s in self._all if s.state != "closed"]
            want = min(max(self.spares, self._want), max(self.max_live - SessionPool._live, 0))
            n = 0 if self._down else max(want - len(self._spares) - self._starting, 0)
            self._starting += n
        left = n
        try:
            while left:  # each a spare as soon as it is made
                s = self._spawn()
                with self._books:
                    left, self._starting = left - 1, self._starting - 1
                    keep = not self._down and s.state != "failed"
                    self._spares += [s] if keep else []
                if not keep:  # shut down meanwhile, or it could not start: no more now
                    self._close([s])
                    break
        finally:
            with self._books:
                self._starting -= left

    def _await_ready(self, sessions: Sequence[Session], deadline: float) -> None:
        waiting = {s.fd: s for s in sessions if s.state == "starting"}
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(waiting), [], [], left)
            for fd in ready:
                s = waiting[fd]
                lines, closed = s.lines()
                said = [_json(line) for line in lines if "ready" in _json(line)]
                if said and said[0]["ready"] == 1:
                    s.state = "spare"
                    del waiting[fd]
                elif said:
                    self._kill(s, "the environment's module failed in its session: "
                                  f"{said[0].get('detail', '')}")
                    del waiting[fd]
                elif closed:
                    self._kill(s, "the sandbox exited while starting")
                    del waiting[fd]
        for s in waiting.values():
            self._kill(s, f"the sandbox did not start within {START_TIMEOUT_S:.0f} s")

    def _exchange(self, sessions: Sequence[Session], msgs: Sequence[dict],
                  timeout_s: float) -> list[dict]:
        """Send each session its message and wait for every reply (by id), concurrently. A
        session that dies, garbles its reply or misses the deadline is killed: its reply is
        a sandbox error."""
        out: list[dict] = [{"status": SANDBOX_ERROR, "detail": "not sent"}] * len(sessions)
        waiting = {}
        for i, (s, msg) in enumerate(zip(sessions, msgs)):
            if s.state not in ("spare", "open"):
                out[i] = {"status": SANDBOX_ERROR, "detail": s.error}
                continue
            try:
                waiting[s.fd] = (i, s, s.send(msg))
            except OSError:
                self._kill(s, "the sandbox's pipe closed")
                out[i] = {"status": SANDBOX_ERROR, "detail": s.error}
        deadline = time.monotonic() + timeout_s
        while waiting:
            left = deadline - time.monotonic()
            ready = select.select(list(waiting), [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                break
            for fd in ready:
                i, s, want = waiting[fd]
                lines, closed = s.lines()
                for line in lines:
                    msg = _json(line)
                    if msg.get("id") == want:
                        out[i] = msg
                        del waiting[fd]
                        break
                else:
                    if closed:
                        self._kill(s, "the session's server exited")
                        out[i] = {"status": SANDBOX_ERROR, "detail": s.error}
                        del waiting[fd]
        for i, s, _ in waiting.values():
            self._kill(s, f"the session's server did not answer within {timeout_s:.0f} s")
            out[i] = {"status": SANDBOX_ERROR, "detail": s.error}
        for i, r in enumerate(out):
            if r.get("status") == SANDBOX_ERROR and sessions[i].state == "open":
                self._kill(sessions[i], str(r.get("detail", "")))  # a server bug: not reused
        return out

    def _kill(self, s: Session, why: str) -> None:
        if s.state not in ("closed", "failed"):
            s.fail(why)
        if s.counted:
            s.counted = False
            with SessionPool._lock:
                SessionPool._live -= 1
        if s.proc is not None:
            bwrap.kill(s.proc)
            for f in (s.proc.stdin, s.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        if s.cgroup is not None and s.cgroup.remove(timeout_s=1.0):
            s.cgroup = None


def _json(line: bytes) -> dict:
    try:
        msg = json.loads(line)
    except ValueError:
        return {}
    return msg if isinstance(msg, dict) else {}
