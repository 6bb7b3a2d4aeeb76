"""Verification on a Ray cluster of CPU machines (issue 41; `verifier.backend=ray`, the
`.[ray]` extra). Each actor owns a `VerifierPool` exactly as a trainer host does (the same
bubblewrap containment, verdicts and firewall) and is placed on a machine that declares the
fleet's resource (`ray start --resources='{"sandbox": N}'`). A batch is split into one
contiguous slice per actor, in order, so the verdicts are the local pool's for the same jobs.

A lost actor (its machine gone, its process killed, no reply within `call_timeout_s`) makes
its slice's verdicts SANDBOX_ERROR (masked out of the loss and of the group baseline, never
scored) and is replaced by a new actor wherever the cluster has the resource; the next batch
runs on it. The actors live in the run's namespace and are killed by `close` (and, with the
driver, when the trainer's Ray connection ends: they are not detached).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional, Sequence

from rlvr_jax.sandbox.privilege import SandboxUnavailable
from rlvr_jax.types import Status, Verdict


def _ray():
    try:
        import ray
    except ImportError as e:  # config validation says it first; a direct use says it here
        raise ImportError("verifier.backend=ray needs the Ray extra: pip install -e '.[ray]'"
                          ) from e
    return ray


def connect(address: str, namespace: str, resource: str):
    """This process joined to the cluster (once), which must have a machine declaring
    `resource`: else one clear error now, not actors waiting forever for a place."""
    ray = _ray()
    if not ray.is_initialized():
        try:
            ray.init(address=address, namespace=namespace or None, log_to_driver=False,
                     configure_logging=False)
        except (ConnectionError, RuntimeError) as e:
            raise SandboxUnavailable(f"no Ray cluster at fleet.address={address!r} ("
                                     f"{str(e).splitlines()[0][:200]}): start one (launch/"
                                     "README.md) or set verifier/env.backend=local") from e
    if ray.cluster_resources().get(resource, 0) < 1:
        raise SandboxUnavailable(f"no machine of the Ray cluster at {address!r} declares the "
                                 f"resource {resource!r} (fleet.resource): start its fleet "
                                 f"nodes with --resources='{{\"{resource}\": N}}'")
    return ray


class PoolActor:
    """One sandbox pool on a fleet machine (a Ray actor: `ray.remote(PoolActor)`)."""

    def __init__(self, kind: str, workers: int, timeout_s: float,
                 batch_timeout_s: Optional[float], mode: Optional[str]):
        from rlvr_jax.sandbox.pool import VerifierPool  # (kinds: codecs' entry points)

        self.pool = VerifierPool(kind, workers=workers, timeout_s=timeout_s,
                                 batch_timeout_s=batch_timeout_s, mode=mode)

    def verify(self, jobs: list) -> list:
        return self.pool.verify(jobs)

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.pool.close()


class _Actors:
    """`count` actors of one class on the machines with `resource`, spread over them (a lost
    machine takes as few as it can), each made from `args`; a lost one is replaced."""

    def __init__(self, cls, args: tuple, *, count: int, address: str, namespace: str,
                 resource: str, call_timeout_s: float, start_timeout_s: float = 300.0,
                 **options):
        ray = connect(address, namespace, resource)
        self._remote = ray.remote(num_cpus=0, resources={resource: 1}, max_restarts=0,
                                  scheduling_strategy="SPREAD", **options)(cls)
        self._args, self.call_timeout_s = args, call_timeout_s
        self.actors = [self._remote.remote(*args) for _ in range(count)]
        self.lost = 0  # actors replaced so far
        self._started(ray, cls.__name__, resource, address, start_timeout_s)

    def _started(self, ray, name: str, resource: str, address: str, timeout_s: float) -> None:
        """Every actor placed and constructed, or one clear error (not calls that wait for a
        place and then mask every episode): a cluster whose `resource` other processes of
        the run, or other runs, already hold."""
        ready, _ = ray.wait([a.__ray_ready__.remote() for a in self.actors],
                            num_returns=len(self.actors), timeout=timeout_s)
        if len(ready) == len(self.actors):
            try:
                ray.get(ready)
                return
            except Exception as e:  # noqa: BLE001 (a constructor that failed on its machine)
                self._end(None)
                raise SandboxUnavailable(f"a {name} failed to start on the Ray cluster at "
                                         f"{address!r}: {str(e).splitlines()[-1][:300]}"
                                         ) from e
        total = ray.cluster_resources().get(resource, 0)
        free, count = ray.available_resources().get(resource, 0), len(self.actors)
        self._end(None)
        raise SandboxUnavailable(
            f"{len(ready)} of this process's {count} {name}s started within "
            f"fleet.start_timeout_s={timeout_s:g} s: each needs 1 unit of {resource!r}, and "
            f"the cluster at {address!r} has {total:g} in all, {free:g} free (each process "
            "of a run makes its own fleet.actors, for verification and for sessions): lower "
            "fleet.actors, add fleet machines, or raise fleet.start_timeout_s")

    def _get(self, ref, default, index: int):
        """An actor's reply, or `default` when the actor is lost or silent past the call
        timeout (infrastructure): then it is replaced."""
        try:
            return _ray().get(ref, timeout=self.call_timeout_s)
        except Exception:  # noqa: BLE001 (lost or late: whatever Ray raised)
            self._replace(index)
            return default

    def _replace(self, i: int) -> None:
        try:
            _ray().kill(self.actors[i], no_restart=True)
        except Exception:  # noqa: BLE001 (already gone)
            pass
        self.actors[i] = self._remote.remote(*self._args)
        self.lost += 1

    def _end(self, method: Optional[str]) -> None:
        """Each actor's `method` (its pool closed; None: not called), then the actor
        killed."""
        ray = _ray()
        for a in self.actors:
            try:
                if method is not None:
                    ray.get(getattr(a, method).remote(), timeout=30)
            except Exception:  # noqa: BLE001 (a lost actor has nothing to close)
                pass
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        self.actors = []


class RayVerifier(_Actors):
    """`submit` / `verify` / `close` (verify/verifiers.py's interface) over `actors` pool
    actors on a Ray cluster."""

    def __init__(self, kind: str, *, workers: int, timeout_s: float,
                 batch_timeout_s: Optional[float], mode: Optional[str], address: str,
                 namespace: str, actors: int, resource: str, call_timeout_s: float,
                 start_timeout_s: float = 300.0):
        super().__init__(PoolActor, (kind, workers, timeout_s, batch_timeout_s, mode),
                         count=actors, address=address, namespace=namespace,
                         resource=resource, call_timeout_s=call_timeout_s,
                         start_timeout_s=start_timeout_s)
        self._executor = ThreadPoolExecutor(1)

    def verify(self, jobs: Sequence[dict]) -> list[Verdict]:
        """One verdict per job, in order: actor k verifies the k-th contiguous slice."""
        jobs = list(jobs)
        n, k = len(jobs), len(self.actors)
        bounds = [(i * n // k, (i + 1) * n // k) for i in range(k)]
        refs = [a.verify.remote(jobs[lo:hi]) if hi > lo else None
                for a, (lo, hi) in zip(self.actors, bounds)]
        out: list[Verdict] = []
        for i, (ref, (lo, hi)) in enumerate(zip(refs, bounds)):
            if ref is not None:
                lost = [Verdict(Status.SANDBOX_ERROR, "the verifier's Ray actor was lost")]
                out += self._get(ref, lost * (hi - lo), i)
        return out

    def submit(self, jobs: Sequence[dict]) -> Future:
        return self._executor.submit(self.verify, list(jobs))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._end("close")


# ---------------------------------------------------------------------- episode sessions
class SessionActor:
    """A session pool on a fleet machine (a threaded Ray actor: its pool is thread-safe, so
    a slow call holds up no other); sessions are named by ids it hands out."""

    def __init__(self, spec, limits, max_live: int, spares: int):
        from rlvr_jax.sandbox.session import SessionPool

        self.pool = SessionPool(spec, limits, max_live=max_live, spares=spares)
        self.sessions: dict = {}
        self.made = 0

    def open(self, contexts: list) -> list:
        out = []
        for s in self.pool.open(contexts):
            self.made += 1
            self.sessions[self.made] = s
            out.append((self.made, s.state, s.error, s.observation))
        return out

    def call(self, ids: list, calls: list) -> list:
        return self.pool.call([self.sessions[i] for i in ids], calls)

    def collect(self, ids: list, paths: list) -> list:
        return self.pool.collect([self.sessions[i] for i in ids], paths)

    def keep_ready(self, count: int) -> None:
        self.pool.keep_ready(count)

    def close(self, ids: list) -> None:
        self.pool.close([self.sessions.pop(i) for i in ids if i in self.sessions])

    def stats(self) -> dict:
        return self.pool.stats()

    def shutdown(self) -> None:
        self.pool.shutdown()


class RemoteSession:
    """A session held by a fleet actor: what the environment reads of a local `Session`."""

    def __init__(self, actor: int, handle, sid: int, state: str, error: str, observation):
        self.actor, self.handle, self.sid = actor, handle, sid  # handle: the actor it is on
        self.state, self.error, self.observation = state, error, observation


class RaySessionPool(_Actors):
    """`SessionPool`'s interface (open / call / collect / close / stats / shutdown) over
    session actors on a Ray cluster: each episode's session lives on one actor and all its
    calls go there. An actor lost (its machine gone) fails its sessions: their calls answer
    sandbox_error (the episode masked, never scored) and the actor is replaced."""

    def __init__(self, spec, limits, *, max_live: int, spares: int, address: str,
                 namespace: str, actors: int, resource: str, call_timeout_s: float,
                 start_timeout_s: float = 300.0, max_sessions: int = 0,
                 opens_per_s: float = 0.0):
        super().__init__(SessionActor, (spec, limits, max_live, spares), count=actors,
                         address=address, namespace=namespace, resource=resource,
                         call_timeout_s=call_timeout_s, start_timeout_s=start_timeout_s,
                         max_concurrency=32)  # threaded
        self._turn = 0  # the next actor to open on (round robin)
        # Admission: at most `cap` sessions of this trainer process live on the fleet (an
        # open waits for room: back-pressure, its rows wait instead of failing), opened at
        # most `opens_per_s` a second (0: no limit).
        self.cap = max_sessions or actors * max_live
        self.opens_per_s = opens_per_s
        self._room = threading.Condition()
        self._live = 0
        self._waiting = 0  # opens waiting for room now
        self._next_open = 0.0  # the rate limit's clock (time.monotonic)
        self.waits = {"wait_s": 0.0, "waited": 0, "waiting_peak": 0}

    def _by_actor(self, sessions) -> dict:
        groups: dict = {}
        for j, s in enumerate(sessions):
            groups.setdefault(s.actor, []).append(j)
        return groups

    def _admit(self, n: int) -> None:
        """Wait until `n` more sessions fit under the cap, then for the rate limit."""
        if n > self.cap:
            raise ValueError(f"{n} sessions opened at once pass the fleet's cap ({self.cap}, "
                             "fleet.max_sessions): raise it or lower the rows per process")
        t0 = time.monotonic()
        with self._room:
            self._waiting += 1
            self.waits["waiting_peak"] = max(self.waits["waiting_peak"], self._waiting)
            while self._live + n > self.cap:
                self._room.wait()
            self._waiting -= 1
            self._live += n
            start = max(self._next_open, time.monotonic())
            if self.opens_per_s:
                self._next_open = start + n / self.opens_per_s
        if self.opens_per_s and start > time.monotonic():
            time.sleep(start - time.monotonic())
        waited = time.monotonic() - t0
        with self._room:
            self.waits["wait_s"] += waited
            self.waits["waited"] += waited > 1e-3

    def _release(self, n: int) -> None:
        with self._room:
            self._live -= n
            self._room.notify_all()

    def open(self, contexts) -> list:
        self._admit(len(contexts))
        k = len(self.actors)
        where = [(self._turn + j) % k for j in range(len(contexts))]
        self._turn = (self._turn + len(contexts)) % k
        refs = {a: self.actors[a].open.remote([c for c, w in zip(contexts, where) if w == a])
                for a in sorted(set(where))}
        handles = {a: self.actors[a] for a in refs}
        out: list = [None] * len(contexts)
        for a, ref in refs.items():
            mine = [j for j, w in enumerate(where) if w == a]
            lost = [(0, "failed", "the session's Ray actor was lost", None)] * len(mine)
            for j, (sid, state, error, observation) in zip(mine, self._get(ref, lost, a)):
                out[j] = RemoteSession(a, handles[a], sid, state, error, observation)
        return out

    def keep_ready(self, count: int) -> None:
        """Opens go round robin over the actors: each keeps its share started ahead."""
        k = len(self.actors)
        for a in range(k):
            self._get(self.actors[a].keep_ready.remote(-(-count // k)), None, a)

    def _gone(self, s: RemoteSession) -> bool:
        """Its actor was replaced (lost with its sessions): the session is failed."""
        if s.handle is not self.actors[s.actor] and s.state != "failed":
            s.state, s.error = "failed", "the session's Ray actor was lost"
        return s.handle is not self.actors[s.actor]

    def call(self, sessions, calls) -> list:
        out: list = [None] * len(sessions)
        refs = {}
        for a, idx in self._by_actor(sessions).items():
            live = [j for j in idx if not self._gone(sessions[j]) and sessions[j].state == "open"]
            for j in set(idx) - set(live):
                out[j] = {"status": "sandbox_error", "detail": sessions[j].error or "not open"}
            if live:
                refs[a] = (live, self.actors[a].call.remote([sessions[j].sid for j in live],
                                                            [calls[j] for j in live]))
        for a, (live, ref) in refs.items():
            lost = [{"status": "sandbox_error", "detail": "the session's Ray actor was lost"}
                    ] * len(live)
            replies = self._get(ref, lost, a)
            for j, r in zip(live, replies):
                out[j] = r
                if r is lost[0]:
                    sessions[j].state, sessions[j].error = "failed", r["detail"]
        return out

    def collect(self, sessions, paths) -> list:
        out: list = [None] * len(sessions)
        for a, idx in self._by_actor(sessions).items():
            idx = [j for j in idx if not self._gone(sessions[j])]
            if not idx:
                continue
            got = self._get(self.actors[a].collect.remote(
                [sessions[j].sid for j in idx], [paths[j] for j in idx]), [None] * len(idx), a)
            for j, files in zip(idx, got):
                out[j] = files
        return out

    def close(self, sessions) -> None:
        self._release(sum(s.state != "closed" for s in sessions))
        for a, idx in self._by_actor(sessions).items():
            idx = [j for j in idx if not self._gone(sessions[j])]
            if idx:
                self._get(self.actors[a].close.remote([sessions[j].sid for j in idx]), None, a)
        for s in sessions:
            s.state = "closed"

    def stats(self) -> dict:
        """The actors' session metrics (the most live and the shares: over actors) and the
        actors lost since the last call."""
        rows = [r for r in (self._get(a.stats.remote(), None, i)
                            for i, a in enumerate(list(self.actors))) if r]
        with self._room:
            out = {"session/actors_lost": float(self.lost), "session/fleet_in_use":
                   self._live / self.cap, "session/admission_wait_s": self.waits["wait_s"],
                   "session/admission_waited": float(self.waits["waited"]),
                   "session/admission_queue_peak": float(self.waits["waiting_peak"])}
            self.waits = {"wait_s": 0.0, "waited": 0, "waiting_peak": self._waiting}
        self.lost = 0
        for key in ("session/live_peak", "session/opened", "session/leaked"):
            out[key] = float(sum(r.get(key, 0.0) for r in rows))
        opened = max(out["session/opened"], 1.0)
        out["session/failure_rate"] = sum(r.get("session/failure_rate", 0.0) *
                                          r.get("session/opened", 0.0) for r in rows) / opened
        return out

    def shutdown(self) -> None:
        self._end("shutdown")

    def leaked(self) -> int:
        return 0  # each actor's pool counts its own (stats: session/leaked)
