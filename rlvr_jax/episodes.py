"""Multi-turn episodes: the turn sampler (jit, tokens) and an environment (host, text) in
turns, token-in token-out.

    decode every live row until EOS / a call's end marker / its budget     (jit)
    -> the turns that ended on a call, decoded, to the environment         (host: one batch)
    -> each observation tokenized alone and appended as ids to the cache   (jit, no re-prefill)
    ... until no row called, or `max_turns`.

The sampler's ids are the record: only the environment's text is tokenized (with
`split_special_tokens`, so a tool output that spells `<|im_end|>` or `<tool_call>` stays text
and can neither end the turn nor forge a role), wrapped in the format's glue (`Glue`, ids made
once), and the history is never decoded and re-encoded. Budgets: `max_turns` policy turns,
`observation_tokens` per observation (longer ones are cut, with a visible marker), and the
episode's R response slots; an episode ends with one reason (eos, budget, max_turns,
no_room, sandbox_error), counted per step.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from rlvr_jax import distributed
from rlvr_jax.envs.base import SANDBOX_ERROR, Environment
from rlvr_jax.turn_sampler import STOP_BUDGET, STOP_CALL, STOP_EOS, TurnSampler
from rlvr_jax.types import Rollout

CUT_MARKER = " ...[cut]"


@dataclass(frozen=True)
class Glue:
    """An observation as ids: prefix ++ tokens(text) ++ suffix, cut to fit."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    marker: tuple[int, ...]
    encode: Callable[[str], list[int]]

    @classmethod
    def of(cls, tokenizer, prefix: str, suffix: str) -> "Glue":
        glue = lambda text: tuple(tokenizer.encode(text, add_special_tokens=False))
        content = lambda text: tokenizer.encode(text, add_special_tokens=False,
                                                split_special_tokens=True)
        return cls(glue(prefix), glue(suffix), tuple(content(CUT_MARKER)), content)

    def ids(self, text: str, limit: int) -> tuple[list[int], bool]:
        """(the observation's ids, whether its text was cut to fit `limit` tokens)."""
        body = self.encode(text)
        room = limit - len(self.prefix) - len(self.suffix)
        cut = len(body) > room
        if cut:
            body = body[: max(room - len(self.marker), 0)] + list(self.marker)[:max(room, 0)]
        return list(self.prefix) + body + list(self.suffix), cut


class Episodes(NamedTuple):
    rollout: Rollout  # host arrays [B, R]
    final_texts: list  # each row's last policy turn: what the task's verifier checks
    sandbox_failed_B: np.ndarray  # bool: a tool's sandbox failed (the episode is masked)
    stats: dict  # episode/* and tool/* metrics of the batch


def _text(tokenizer, ids, eos_id: int) -> str:
    return tokenizer.decode([t for t in ids if t != eos_id], skip_special_tokens=True)


def run(sampler: TurnSampler, env: Environment, tokenizer, glue: Glue, params, prompt_B_L,
        pmask_B_L, key, *, max_turns: int, put: Callable, contexts=None) -> Episodes:
    """One batch of episodes (host arrays in, host arrays out); `contexts`: each row's task
    context for the tools (or None)."""
    contexts = contexts if contexts is not None else [{}] * prompt_B_L.shape[0]
    b = prompt_B_L.shape[0]
    o, eos = sampler.observation_tokens, tokenizer.eos_token_id
    state = sampler.start(params, put(prompt_B_L), put(pmask_B_L), key)
    turns_B = np.zeros(b, np.int32)
    calls = collections.Counter()  # (tool, outcome) -> count
    reason_B = np.full(b, "", object)
    failed_B = np.zeros(b, bool)
    cut_obs = 0
    for turn in range(max_turns):
        live_before = ~np.asarray(distributed.to_host(state.done_B))
        state = sampler.decode(params, state)
        stop_B, col_B, start_B, tokens_B_R = distributed.to_host(
            (state.stop_B, state.col_B, state.turn_start_B, state.tokens_B_R))
        turns_B += live_before
        called = np.flatnonzero(live_before & (stop_B == STOP_CALL))
        for r in np.flatnonzero(live_before & (stop_B == STOP_EOS)):
            reason_B[r] = "eos"
        for r in np.flatnonzero(live_before & (stop_B == STOP_BUDGET)):
            reason_B[r] = "budget"
        if not called.size:
            break
        obs_B_O = np.full((b, o), tokenizer.pad_token_id, np.int32)
        len_B, end_B = np.zeros(b, np.int32), np.zeros(b, bool)
        if turn == max_turns - 1:  # the last turn's call is never run
            end_B[called] = True
            reason_B[called] = "max_turns"
        else:
            texts = [_text(tokenizer, tokens_B_R[r, start_B[r]:col_B[r]], eos) for r in called]
            for r, reply in zip(called, env.respond(texts, [contexts[r] for r in called])):
                calls[(reply.tool or "-", reply.outcome)] += 1
                if reply.outcome == SANDBOX_ERROR:
                    end_B[r], failed_B[r], reason_B[r] = True, True, "sandbox_error"
                    continue
                ids, cut = glue.ids(reply.text, o)
                if col_B[r] + len(ids) >= tokens_B_R.shape[1]:  # no slot left to answer in
                    end_B[r], reason_B[r] = True, "no_room"
                    continue
                cut_obs += cut
                obs_B_O[r, :len(ids)], len_B[r] = ids, len(ids)
        state = sampler.extend(params, state, put(obs_B_O), put(len_B), put(end_B))
    rollout = Rollout(*(np.asarray(x) for x in distributed.to_host(sampler.rollout(state))))
    stop_B, col_B, start_B = distributed.to_host((state.stop_B, state.col_B, state.turn_start_B))
    for r in np.flatnonzero(reason_B == ""):  # still calling when the loop ended
        reason_B[r] = "max_turns"
    final = [_text(tokenizer, rollout.tokens_B_R[r, start_B[r]:col_B[r]], eos) for r in range(b)]
    return Episodes(rollout, final, failed_B,
                    stats(turns_B, calls, reason_B, rollout, cut_obs, pmask_B_L))


def stats(turns_B, calls: collections.Counter, reason_B, rollout: Rollout, cut_obs: int,
          pmask_B_L) -> dict:
    """Per step: turns and calls per episode, each tool's error rate, malformed calls, the
    observations' share of the context, why episodes ended, cut observations."""
    b = len(turns_B)
    obs_tokens = float(((rollout.mask_B_R == 1) & (rollout.loss_mask_B_R == 0)).sum())
    context = float(rollout.mask_B_R.sum() + np.asarray(pmask_B_L).sum())
    n_calls = sum(calls.values())
    row = {"episode/turns_mean": float(np.mean(turns_B)),
           "episode/tool_calls_mean": n_calls / b,
           "episode/observation_share": obs_tokens / max(context, 1.0),
           "episode/observations_cut": float(cut_obs)}
    by_outcome = collections.Counter()
    by_tool = collections.defaultdict(collections.Counter)
    for (tool, outcome), n in calls.items():
        by_outcome[outcome] += n
        by_tool[tool][outcome] += n
    for outcome in ("malformed", "unknown_tool", "tool_error", "sandbox_error"):
        row[f"tool/{outcome}_rate"] = by_outcome[outcome] / max(n_calls, 1)
    for tool, counts in by_tool.items():
        if tool != "-":
            row[f"tool/{tool}/calls_mean"] = sum(counts.values()) / b
            row[f"tool/{tool}/error_rate"] = counts["tool_error"] / max(sum(counts.values()), 1)
    for reason in ("eos", "budget", "max_turns", "no_room", "sandbox_error"):
        row[f"episode/ended_{reason}"] = float(np.mean(reason_B == reason))
    return row
