"""What an environment is to the episode driver (rlvr_jax/episodes.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

from rlvr_jax.types import Verdict

# Reply outcomes (each counted per step: rlvr_jax/episodes.py).
OK, TOOL_ERROR, MALFORMED, UNKNOWN_TOOL, SANDBOX_ERROR = (
    "ok", "tool_error", "malformed", "unknown_tool", "sandbox_error")
OUTCOMES = (OK, TOOL_ERROR, MALFORMED, UNKNOWN_TOOL, SANDBOX_ERROR)  # metrics index them


@dataclass(frozen=True)
class Reply:
    """The environment's answer to one turn that ended on a call."""

    text: str  # the observation: what the policy reads next (an error is one too)
    outcome: str  # OK | TOOL_ERROR | MALFORMED | UNKNOWN_TOOL | SANDBOX_ERROR
    tool: str = ""  # the tool called ("" when the call could not be read)
    # A per-turn reward, placed at the token that ended the turn (the call's end marker) and
    # added to the episode's outcome reward: 0 (the default) leaves outcome-only training.
    reward: float = 0.0


@dataclass
class Episode:
    """One episode as its environment keeps it, from `open` to `close_episodes`."""

    context: dict  # the task's context for it (`Task.tool_context`)
    handle: Any = None  # the environment's own: a sandbox session, or None (stateless)
    failed: str = ""  # why its infrastructure failed ("" if it did not): the episode is masked
    calls: int = 0  # calls answered
    observation: str = ""  # the first observation, shown before the policy's first turn
    closed: bool = False


class Environment(Protocol):
    """The episode lifecycle (driven by rlvr_jax/episodes.py, every live episode of a turn
    together): `open` an episode per row, `step` each turn that ended on a call, `finish`
    each into its final verdict, and `close_episodes` on every path (their end, a budget, a
    failure, an exception, a stop signal), idempotently."""

    tools: tuple[str, ...]  # the tools a call may name (metrics are kept per tool)
    # Texts that end a policy turn with a call (the sampler stops on their token ids).
    stop_texts: tuple[str, ...]
    # What surrounds an observation in the context (chat glue, or the format's delimiters).
    observation_prefix: str
    observation_suffix: str

    def open(self, contexts: Sequence[dict]) -> list[Episode]:
        """One episode per context, opened together (a session each, for a stateful
        environment). One whose infrastructure failed comes back with `failed` set."""
        ...

    def step(self, episodes: Sequence[Episode], turns: Sequence[str]) -> list[Reply]:
        """One reply per (episode, turn that ended on a call), every call at once. Never
        raises because of what a turn says (a bad call is an observation, a failed sandbox
        is SANDBOX_ERROR)."""
        ...

    def finish(self, episodes: Sequence[Episode], final_texts: Sequence[str]
               ) -> list[Optional[Verdict]]:
        """Each episode's verdict from its world's final state, or None where the task's
        verifier judges the final text (a stateless environment: always None)."""
        ...

    def close_episodes(self, episodes: Sequence[Episode]) -> None:
        """Release each episode's state (its session); idempotent."""
        ...

    # Optional: `prepare(contexts)`, these episodes open soon (a stream calls it as it
    # queues a batch, on an environment thread): start what their opens need, e.g. sandboxes.

    def stats(self) -> dict:
        """Metrics since the last call (session/* for a stateful environment)."""
        ...

    def render_call(self, tool: str, arguments: dict) -> str:
        """A call as the policy writes it (warm-start demonstrations)."""
        ...

    def close(self) -> None: ...


class Stateless:
    """The lifecycle of an environment that keeps nothing between calls: `respond(turns,
    contexts)` answers a batch of turns; an episode is its task context; the task's verifier
    judges the final text."""

    def open(self, contexts: Sequence[dict]) -> list[Episode]:
        return [Episode(dict(c)) for c in contexts]

    def step(self, episodes: Sequence[Episode], turns: Sequence[str]) -> list[Reply]:
        return self.respond(turns, [e.context for e in episodes])

    def finish(self, episodes: Sequence[Episode], final_texts: Sequence[str]) -> list:
        return [None] * len(episodes)

    def close_episodes(self, episodes: Sequence[Episode]) -> None:
        for e in episodes:
            e.closed = True

    def stats(self) -> dict:
        return {}
