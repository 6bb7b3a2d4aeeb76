"""Tools in the sandbox as an environment: each turn that ended on a call is read in the
call format, validated against the tool's schema (verify/toolbox.py), and every valid call of
the batch runs as one batch in a verifier pool of kind `tool_run` (bubblewrap; never in the
trainer process). The observation is the tool's output, or its error ("error: ..."): a tool
that raises, times out or runs out of memory is something the policy sees, and so is a
malformed call or an unknown tool (never a silent drop). A sandbox that fails is the
episode's SANDBOX_ERROR (out of the loss and the group baseline, never a wrong answer).
`turn_rewards` (call outcome -> reward, e.g. {"malformed": -0.1}) gives each turn's call a
per-turn reward at the token that ended it; none by default (outcome reward only)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from rlvr_jax.envs.base import MALFORMED, OK, SANDBOX_ERROR, TOOL_ERROR, UNKNOWN_TOOL, Reply
from rlvr_jax.envs.calls import CallFormat
from rlvr_jax.types import Status
from rlvr_jax.verify import tool_run
from rlvr_jax.sandbox import firewall
from rlvr_jax.sandbox.pool import VerifierPool
from rlvr_jax.verify.toolbox import SCHEMAS, check_call


class ToolEnvironment:
    def __init__(self, tools: list[str], call_format: CallFormat, *, workers: int,
                 timeout_s: float, batch_timeout_s: float, mode: str, result_offset: int = 0,
                 turn_rewards: dict | None = None):
        unknown = [t for t in tools if t not in SCHEMAS]
        if unknown:
            raise ValueError(f"unknown tools {unknown} (known: {', '.join(sorted(SCHEMAS))})")
        self.tools, self.format, self.result_offset = tuple(tools), call_format, result_offset
        self.turn_rewards = dict(turn_rewards or {})  # call outcome -> per-turn reward
        self.stop_texts = call_format.stop_texts(list(tools))
        self.observation_prefix = call_format.observation_prefix
        self.observation_suffix = call_format.observation_suffix
        self._pool = VerifierPool("tool_run", workers=workers, timeout_s=timeout_s,
                                  batch_timeout_s=batch_timeout_s, mode=mode)

    def render_call(self, tool: str, arguments: dict) -> str:
        return self.format.render(tool, arguments)

    def _read(self, turn: str):
        """(tool, arguments) or a Reply for a call that cannot run."""
        parsed = self.format.parse(turn, list(self.tools))
        if isinstance(parsed, str):
            return Reply(f"error: {parsed}", MALFORMED)
        tool, arguments = parsed
        problem = check_call(tool, arguments, list(self.tools))
        if problem:
            known = isinstance(tool, str) and tool in self.tools
            return Reply(f"error: {problem}", MALFORMED if known else UNKNOWN_TOOL,
                         tool if known else "")
        return tool, arguments

    def respond(self, turns: Sequence[str], contexts: Sequence[dict] | None = None) -> list[Reply]:
        contexts = contexts if contexts is not None else [{}] * len(turns)
        replies: list = []
        for turn in turns:  # reading a turn is candidate data: behind the firewall
            read, failed = firewall.attempt(lambda: self._read(turn), lambda: self._read(""),
                                            Status.RUNTIME_ERROR, "tool call")
            if failed is not None:  # our bug (the control failed too) or the candidate's
                read = (Reply("", SANDBOX_ERROR) if failed.status == Status.SANDBOX_ERROR
                        else Reply("error: the call could not be read", MALFORMED))
            replies.append(read)
        runs = [i for i, r in enumerate(replies) if isinstance(r, tuple)]
        verdicts = self._pool.verify([{"tool": replies[i][0], "arguments": replies[i][1],
                                       "context": contexts[i]} for i in runs])
        for i, v in zip(runs, verdicts):
            tool = replies[i][0]
            if v.status == Status.SANDBOX_ERROR:
                replies[i] = Reply("", SANDBOX_ERROR, tool)
            else:
                text = tool_run.observation(v)
                if self.result_offset and v.status == Status.PASS and _is_int(text):
                    text = str(int(text) + self.result_offset)  # the control's wrong tool
                replies[i] = Reply(text, OK if v.status == Status.PASS else TOOL_ERROR, tool)
        return [r if r.outcome == SANDBOX_ERROR else
                dataclasses.replace(r, reward=float(self.turn_rewards.get(r.outcome, 0.0)))
                for r in replies]

    def close(self) -> None:
        self._pool.close()


def _is_int(text: str) -> bool:
    return 0 < len(text) < 100 and text.lstrip("-").isdigit()
