"""Tools in the sandbox as an environment, stateless: each turn that ended on a call is read
in the call format, validated against the tool's schema (verify/toolbox.py), and every valid
call of the batch runs as one batch in a verifier pool of kind `tool_run` (bubblewrap; never
in the trainer process), each from nothing (the `python` tool starts from an empty scope).
The observation is the tool's output, or its error ("error: ..."): a tool that raises, times
out or runs out of memory is something the policy sees, and so is a malformed call or an
unknown tool (never a silent drop). A sandbox that fails is the episode's SANDBOX_ERROR (out
of the loss and the group baseline, never a wrong answer). `turn_rewards` (call outcome ->
reward, e.g. {"malformed": -0.1}) gives each turn's call a per-turn reward at the token that
ended it; none by default (outcome reward only). Its episodes keep nothing but their task
context; the task's verifier judges the final text."""

from __future__ import annotations

from typing import Sequence

from rlvr_jax.envs import turns as turn_reading
from rlvr_jax.envs.base import OK, SANDBOX_ERROR, TOOL_ERROR, Reply, Stateless
from rlvr_jax.envs.calls import CallFormat
from rlvr_jax.sandbox.pool import VerifierPool
from rlvr_jax.types import Status
from rlvr_jax.verify import tool_run
from rlvr_jax.verify.toolbox import SCHEMAS


class ToolEnvironment(Stateless):
    def __init__(self, tools: list[str], call_format: CallFormat, *, workers: int,
                 timeout_s: float, batch_timeout_s: float, mode: str,
                 turn_rewards: dict | None = None):
        unknown = [t for t in tools if t not in SCHEMAS]
        if unknown:
            raise ValueError(f"unknown tools {unknown} (known: {', '.join(sorted(SCHEMAS))})")
        self.tools, self.format = tuple(tools), call_format
        self.turn_rewards = dict(turn_rewards or {})  # call outcome -> per-turn reward
        self.stop_texts = call_format.stop_texts(list(tools))
        self.observation_prefix = call_format.observation_prefix
        self.observation_suffix = call_format.observation_suffix
        self._pool = VerifierPool("tool_run", workers=workers, timeout_s=timeout_s,
                                  batch_timeout_s=batch_timeout_s, mode=mode)

    def render_call(self, tool: str, arguments: dict) -> str:
        return self.format.render(tool, arguments)

    # ------------------------------------------------------------------ calls
    def respond(self, turns: Sequence[str], contexts: Sequence[dict] | None = None) -> list[Reply]:
        """One reply per turn text, every call of the batch at once; `contexts`: each
        turn's task context for its tools (a database, the visible tests)."""
        contexts = contexts if contexts is not None else [{}] * len(turns)
        replies: list = [turn_reading.read(self.format, t, self.tools) for t in turns]
        runs = [i for i, r in enumerate(replies) if isinstance(r, tuple)]
        verdicts = self._pool.verify([{"tool": replies[i][0], "arguments": replies[i][1],
                                       "context": contexts[i]} for i in runs])
        for i, v in zip(runs, verdicts):
            tool = replies[i][0]
            replies[i] = (Reply("", SANDBOX_ERROR, tool) if v.status == Status.SANDBOX_ERROR
                          else self.observe(tool, v))
        return turn_reading.rewarded(replies, self.turn_rewards)

    def observe(self, tool: str, v) -> Reply:
        """A call's verdict as what the policy reads (a control wraps this: experiments)."""
        return Reply(tool_run.observation(v), OK if v.status == Status.PASS else TOOL_ERROR,
                     tool)

    def close(self) -> None:
        self._pool.close()
