"""A stateful environment: an environment module (envs/world.py) run in a sandbox session per
episode (rlvr_jax/sandbox/session.py), its final state judged in a separate box.

    open    a session per episode, all at once: a spare whose world has the module loaded
            already runs `setup(**context["setup"])` (~ a pipe round trip and the setup);
            what setup returns (if not None) is the episode's first observation
    step    every episode's call at once: read and validated on the host (a bad call is an
            observation), run in its own session, where the state of earlier calls is
    finish  the declared ARTIFACTS are read out of each session (after its processes are
            killed) and `check(files, goal)` runs on them in a fresh verification sandbox
            (kind `world_check`, envs/world_check.py) with the task's hidden `goal`, which
            never enters a session; an environment without `check` leaves the verdict to
            the task's verifier on the final text
    close   each session's sandbox is killed and its cgroup removed (idempotent; the driver
            calls it on every path)

What the agent causes is an observation: a tool's error, a call past its time (interrupted,
state kept; or killed and restarted, state lost, and said so), a world that died (restarted,
said so), output past the cap (cut, said so). Only a session that fails by itself is
SANDBOX_ERROR, which masks the episode. An episode past its wall clock (`episode_s`) gets an
observation saying so for every further call, and is judged as it stands when it ends (the
same rule as a turn or token budget: the final state is the agent's).
"""

from __future__ import annotations

import base64
import json
from typing import Optional, Sequence

from rlvr_jax.envs import turns as turn_reading
from rlvr_jax.envs.base import OK, SANDBOX_ERROR, TOOL_ERROR, Episode, Reply
from rlvr_jax.envs.calls import CallFormat
from rlvr_jax.envs.world import World
from rlvr_jax.sandbox.session import SessionLimits, SessionPool, Spec
from rlvr_jax.types import Status, Verdict

MAX_VALUE_CHARS = 20_000  # of a returned value's text (the driver cuts it to tokens after)


class SessionEnvironment:
    # Disjoint episodes may be stepped from several threads at once (a stream's environment
    # threads: a slow call holds up no other): the session pool is thread-safe, the final
    # checks' pool is used by one thread at a time.
    concurrent_episodes = True

    def __init__(self, world: World, call_format: CallFormat, *, limits: SessionLimits,
                 max_live: int = 64, spares: int = 2, turn_rewards: Optional[dict] = None,
                 check_workers: int = 2, check_timeout_s: float = 30.0, mode: str = "forkserver",
                 max_calls: int = 0, fleet=None):
        self.world, self.format = world, call_format
        self.tools = world.tools
        self.turn_rewards = dict(turn_rewards or {})
        self.stop_texts = call_format.stop_texts(list(self.tools), world.schemas)
        self.observation_prefix = call_format.observation_prefix
        self.observation_suffix = call_format.observation_suffix
        self.limits = limits
        self.max_calls = max_calls  # per episode; 0: only env.max_turns bounds them
        spec = Spec(world.session_source, self.tools, world.workspace)
        if fleet is not None:  # env.backend=ray: the sessions on fleet actors
            from rlvr_jax.sandbox.fleet import RaySessionPool

            self._sessions = RaySessionPool(
                spec, limits, max_live=max_live, spares=spares, address=fleet.address,
                namespace=fleet.namespace, actors=fleet.actors, resource=fleet.resource,
                call_timeout_s=fleet.call_timeout_s, start_timeout_s=fleet.start_timeout_s,
                max_sessions=fleet.max_sessions,
                opens_per_s=fleet.opens_per_s)
        else:
            self._sessions = SessionPool(spec, limits, max_live=max_live, spares=spares)
        self._check = None
        if world.check_source is not None:
            from rlvr_jax.envs import world_check  # registers the kind
            from rlvr_jax.sandbox.pool import VerifierPool

            self._check = VerifierPool(world_check.kind_for(world.workspace),
                                       workers=check_workers,
                                       timeout_s=check_timeout_s,
                                       batch_timeout_s=check_timeout_s * 4, mode=mode)

    def render_call(self, tool: str, arguments: dict) -> str:
        return self.format.render(tool, arguments, self.world.schemas)

    # ------------------------------------------------------------------ lifecycle
    def open(self, contexts: Sequence[dict]) -> list[Episode]:
        sessions = self._sessions.open([dict(c.get("setup", {})) for c in contexts])
        return [Episode(dict(c), s, "" if s.state == "open" else (s.error or "not opened"),
                        observation=_text(s.observation))
                for c, s in zip(contexts, sessions)]

    def prepare(self, contexts: Sequence[dict]) -> None:
        """These episodes open soon (a stream's next batch): their sandboxes start now."""
        self._sessions.keep_ready(len(contexts))

    def step(self, episodes: Sequence[Episode], turns: Sequence[str]) -> list[Reply]:
        replies: list = [turn_reading.read(self.format, t, self.tools, self.world.schemas)
                         for t in turns]
        for i, r in enumerate(replies):
            if isinstance(r, tuple) and self.max_calls and episodes[i].calls >= self.max_calls:
                replies[i] = Reply(f"error: the episode's tool-call budget ({self.max_calls}) is "
                                   "spent", TOOL_ERROR, r[0])
        runs = [i for i, r in enumerate(replies) if isinstance(r, tuple)]
        got = self._sessions.call([episodes[i].handle for i in runs],
                                  [replies[i] for i in runs])
        for i, g in zip(runs, got):
            tool = replies[i][0]
            episodes[i].calls += 1
            if g.get("status") == "sandbox_error":
                episodes[i].failed = str(g.get("detail", "the session failed"))
                replies[i] = Reply("", SANDBOX_ERROR, tool)
            else:
                replies[i] = self.observe(tool, g)
        return turn_reading.rewarded(replies, self.turn_rewards)

    def observe(self, tool: str, g: dict) -> Reply:
        """A session's reply as what the policy reads."""
        text = g.get("stdout", "") if isinstance(g.get("stdout"), str) else ""
        status = g.get("status")
        if status == "episode_limit":
            return Reply(f"error: the episode's time ({self.limits.episode_s:g} s) is up",
                         TOOL_ERROR, tool)
        if status == "timeout":
            lost = ("the session was restarted: its state is lost" if g.get("restarted")
                    else "it was interrupted; the session's state is kept")
            return Reply(text + f"error: the call timed out after {self.limits.call_s:g} s "
                         f"({lost})", TOOL_ERROR, tool)
        if status == "died":
            return Reply(text + f"error: the session's process ended ({g.get('exit') or 'killed'}"
                         "); it was restarted and its state is lost", TOOL_ERROR, tool)
        if "error" in g:
            return Reply(text + f"error: {g['error']}", TOOL_ERROR, tool)
        return Reply(text + _text(g.get("value")), OK, tool)

    def finish(self, episodes: Sequence[Episode], final_texts: Sequence[str]
               ) -> list[Optional[Verdict]]:
        if self._check is None:
            return [None] * len(episodes)
        live = [i for i, e in enumerate(episodes) if not e.failed]
        files = self._sessions.collect([episodes[i].handle for i in live],
                                       [self.world.artifacts] * len(live))
        out: list[Optional[Verdict]] = [
            Verdict(Status.SANDBOX_ERROR, f"the session failed: {e.failed}")
            if e.failed else None for e in episodes]
        jobs, where = [], []
        for i, f in zip(live, files):
            if f is None:
                out[i] = Verdict(Status.SANDBOX_ERROR, "the final state could not be read")
                continue
            jobs.append({"source": self.world.check_source,
                         "files": {p: base64.b64encode(b).decode() for p, b in f.items()},
                         "goal": episodes[i].context.get("goal")})
            where.append(i)
        verdicts = self._check.verify(jobs)  # (the pool runs concurrent calls in turn)
        for i, v in zip(where, verdicts):
            out[i] = v
        return out

    def close_episodes(self, episodes: Sequence[Episode]) -> None:
        self._sessions.close([e.handle for e in episodes if e.handle is not None])
        for e in episodes:
            e.closed = True

    def stats(self) -> dict:
        return self._sessions.stats()

    def close(self) -> None:
        self._sessions.shutdown()
        if self._check is not None:
            self._check.close()


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value[:MAX_VALUE_CHARS]
    try:
        return json.dumps(value)[:MAX_VALUE_CHARS]
    except (TypeError, ValueError):
        return "error: the tool's result is not JSON"
