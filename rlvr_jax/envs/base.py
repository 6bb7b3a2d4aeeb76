"""What an environment is to the episode driver (rlvr_jax/episodes.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

# Reply outcomes (each counted per step: rlvr_jax/episodes.py).
OK, TOOL_ERROR, MALFORMED, UNKNOWN_TOOL, SANDBOX_ERROR = (
    "ok", "tool_error", "malformed", "unknown_tool", "sandbox_error")


@dataclass(frozen=True)
class Reply:
    """The environment's answer to one turn that ended on a call."""

    text: str  # the observation: what the policy reads next (an error is one too)
    outcome: str  # OK | TOOL_ERROR | MALFORMED | UNKNOWN_TOOL | SANDBOX_ERROR
    tool: str = ""  # the tool called ("" when the call could not be read)
    # A per-turn reward, placed at the token that ended the turn (the call's end marker) and
    # added to the episode's outcome reward: 0 (the default) leaves outcome-only training.
    reward: float = 0.0


class Environment(Protocol):
    tools: tuple[str, ...]  # the tools a call may name (metrics are kept per tool)
    # Texts that end a policy turn with a call (the sampler stops on their token ids).
    stop_texts: tuple[str, ...]
    # What surrounds an observation in the context (chat glue, or the format's delimiters).
    observation_prefix: str
    observation_suffix: str

    def respond(self, turns: Sequence[str], contexts: Sequence[dict] | None = None) -> list[Reply]:
        """One reply per turn text, in order; every call of the batch at once. `contexts`:
        each turn's task context for its tools (`Task.tool_context`, e.g. a database or the
        visible tests). Never raises because of what a turn says (a bad call is an
        observation, a failed sandbox is SANDBOX_ERROR)."""
        ...

    def render_call(self, tool: str, arguments: dict) -> str:
        """A call as the policy writes it (warm-start demonstrations)."""
        ...

    def close(self) -> None: ...
