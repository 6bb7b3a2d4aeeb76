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

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from rlvr_jax import distributed
from rlvr_jax.envs.base import OUTCOMES, SANDBOX_ERROR, TOOL_ERROR, Environment
from rlvr_jax.turn_sampler import STOP_BUDGET, STOP_CALL, STOP_EOS, TurnSampler
from rlvr_jax.types import Generated, Rollout, Status, Verdict

CUT_MARKER = " ...[cut]"


@dataclass(frozen=True)
class Glue:
    """An observation as ids: prefix ++ tokens(text) ++ suffix, cut to fit."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    marker: tuple[int, ...]
    encode: Callable[[str], list[int]]
    # The most characters one token covers: an observation is cut to `limit` times this
    # before it is tokenized, so a reply of any size costs bounded host time and memory (a
    # 10 MB reply tokenized whole took 44 s and 4.5 GB), and the tokens kept are the same.
    token_chars: int = 64

    @classmethod
    def of(cls, tokenizer, prefix: str, suffix: str) -> "Glue":
        glue = lambda text: tuple(tokenizer.encode(text, add_special_tokens=False))
        content = lambda text: tokenizer.encode(text, add_special_tokens=False,
                                                split_special_tokens=True)
        longest = max((len(t) for t in tokenizer.get_vocab()), default=64)
        return cls(glue(prefix), glue(suffix), tuple(content(CUT_MARKER)), content,
                   max(longest, 1))

    def ids(self, text: str, limit: int) -> tuple[list[int], bool]:
        """(the observation's ids, whether its text was cut to fit `limit` tokens)."""
        body = self.encode(text[: (limit + 1) * self.token_chars])
        room = limit - len(self.prefix) - len(self.suffix)
        cut = len(body) > room or len(text) > (limit + 1) * self.token_chars
        if cut:
            body = body[: max(room - len(self.marker), 0)] + list(self.marker)[:max(room, 0)]
        return list(self.prefix) + body + list(self.suffix), cut


def _text(tokenizer, ids, eos_id: int) -> str:
    """A final turn's text for the verifier (special tokens dropped)."""
    return tokenizer.decode([t for t in ids if t != eos_id], skip_special_tokens=True)


def turn_text(tokenizer, ids) -> str:
    """A turn that ended on a call, for the environment: special tokens kept (a chat
    model's `<tool_call>` markers are special tokens), EOS and padding dropped."""
    drop = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    return tokenizer.decode([t for t in ids if t not in drop], skip_special_tokens=False)


REASONS = ("", "eos", "budget", "max_turns", "no_room", "sandbox_error")  # why episodes end


def run(sampler: TurnSampler, env: Environment, tokenizer, glue: Glue, params, prompt_B_L,
        pmask_B_L, key, *, max_turns: int, put: Callable, contexts=None,
        rows_B=None) -> Generated:
    """One batch of episodes (host arrays in, host arrays out); `contexts`: each row's task
    context for the environment (or None). Over several processes each opens, steps,
    finishes and closes the episodes of the rows its devices hold (distributed.my_rows) and
    the observations are gathered, so every process feeds the same arrays to the sampler;
    the texts and environment verdicts are every row's. The episodes are closed on every
    path out of here (an exception, a stop signal included)."""
    b = prompt_B_L.shape[0]
    contexts = contexts if contexts is not None else [{}] * b
    mine = distributed.my_rows(b)
    clock = _Clock()
    t0 = time.perf_counter()
    opened = clock.time(env.open, [contexts[r] for r in range(mine.start, mine.stop)])
    try:
        made = _drive(sampler, env, tokenizer, glue, params, prompt_B_L, pmask_B_L, key,
                      max_turns, put, rows_B, mine, opened, clock)
    finally:
        env.close_episodes(opened)
    wall = time.perf_counter() - t0
    row = rollout_stats(clock.wait_s, wall, float(made.rollout.loss_mask_B_R.sum()),
                        made.stats.pop("steps"), b, clock.call_s)
    return made._replace(stats={**made.stats, **row, **env.stats()})  # sessions after close


class _Clock:
    """The lock-step driver's waits on its environment (the devices idle meanwhile)."""

    def __init__(self):
        self.wait_s, self.call_s = 0.0, []

    def time(self, fn, *args, calls: int = 0):
        t0 = time.perf_counter()
        out = fn(*args)
        self.wait_s += time.perf_counter() - t0
        self.call_s += [time.perf_counter() - t0] * calls
        return out


def _drive(sampler, env, tokenizer, glue, params, prompt_B_L, pmask_B_L, key, max_turns, put,
           rows_B, mine, opened, clock) -> Generated:
    b = prompt_B_L.shape[0]
    o, eos = sampler.observation_tokens, tokenizer.eos_token_id
    tools = tuple(env.tools)
    turns_B = np.zeros(b, np.int32)
    reason_B = np.zeros(b, np.int8)  # index into REASONS
    failed_B = np.zeros(b, bool)
    calls_B_T_O = np.zeros((b, len(tools) + 1, len(OUTCOMES)), np.int32)  # + unknown tool
    cut_B = np.zeros(b, np.int32)
    for r, episode in zip(range(mine.start, mine.stop), opened):
        failed_B[r] = bool(episode.failed)  # its session could not open: masked
    rows_B = np.arange(b) if rows_B is None else rows_B  # the sequences' streams
    state = sampler.start(params, put(prompt_B_L), put(pmask_B_L), key,
                          put(np.asarray(rows_B, np.int32)))
    turn_rewards_B_R = np.zeros(state.tokens_B_R.shape, np.float32)  # shape only: no copy
    state = _first_observations(sampler, glue, params, state, opened, mine, b, cut_B, put,
                                tokenizer.pad_token_id)
    for turn in range(max_turns):
        live_before = ~np.asarray(distributed.to_host(state.done_B))
        state = sampler.decode(params, state)
        stop_B, col_B, start_B, tokens_B_R = distributed.to_host(
            (state.stop_B, state.col_B, state.turn_start_B, state.tokens_B_R))
        turns_B += live_before
        called_B = live_before & (stop_B == STOP_CALL)
        reason_B[live_before & (stop_B == STOP_EOS)] = REASONS.index("eos")
        reason_B[live_before & (stop_B == STOP_BUDGET)] = REASONS.index("budget")
        if not called_B.any():
            break
        obs_B_O = np.full((b, o), tokenizer.pad_token_id, np.int32)
        len_B, end_B = np.zeros(b, np.int32), np.zeros(b, bool)
        if turn == max_turns - 1:  # the last turn's call is never run
            end_B[called_B] = True
            reason_B[called_B] = REASONS.index("max_turns")
        else:
            rows = [r for r in np.flatnonzero(called_B) if mine.start <= r < mine.stop]
            for r in [r for r in rows if failed_B[r]]:  # no session to call
                end_B[r], reason_B[r] = True, REASONS.index("sandbox_error")
            rows = [r for r in rows if not failed_B[r]]
            texts = [turn_text(tokenizer, tokens_B_R[r, start_B[r]:col_B[r]]) for r in rows]
            replies = clock.time(env.step, [opened[r - mine.start] for r in rows], texts,
                                 calls=len(rows))
            for r, reply in zip(rows, replies):
                tool = tools.index(reply.tool) if reply.tool in tools else len(tools)
                calls_B_T_O[r, tool, OUTCOMES.index(reply.outcome)] += 1
                turn_rewards_B_R[r, col_B[r] - 1] += reply.reward  # the call's last token
                if reply.outcome == SANDBOX_ERROR:
                    end_B[r], failed_B[r] = True, True
                    reason_B[r] = REASONS.index("sandbox_error")
                    continue
                ids, cut = glue.ids(reply.text, o)
                if col_B[r] + len(ids) >= tokens_B_R.shape[1]:  # no slot left to answer in
                    end_B[r], reason_B[r] = True, REASONS.index("no_room")
                    continue
                cut_B[r] += cut
                obs_B_O[r, :len(ids)], len_B[r] = ids, len(ids)
            # Each process filled its own rows: every process gets all of them.
            obs_B_O, len_B, end_B, failed_B, reason_B = (
                distributed.gather_rows(x[mine]) for x in (obs_B_O, len_B, end_B, failed_B,
                                                            reason_B))
        state = sampler.extend(params, state, put(obs_B_O), put(len_B), put(end_B))
    col_B, start_B, steps = distributed.to_host((state.col_B, state.turn_start_B, state.steps))
    reason_B[reason_B == 0] = REASONS.index("max_turns")  # still calling when the loop ended
    calls_B_T_O, cut_B, turn_rewards_B_R, failed_B = (distributed.gather_rows(x[mine]) for x in (
        calls_B_T_O, cut_B, turn_rewards_B_R, failed_B))
    rollout = Rollout(*distributed.to_host(sampler.rollout(state))).host()._replace(
        turn_rewards_B_R=turn_rewards_B_R)
    final = [_text(tokenizer, rollout.tokens_B_R[r, start_B[r]:col_B[r]], eos) for r in range(b)]
    # The environment's verdicts of its own episodes (their worlds' final states), then the
    # failures: an episode whose sandbox failed is masked whatever its world says.
    mine_verdicts = clock.time(env.finish, opened, final[mine])
    verdicts = gather_verdicts(
        [Verdict(Status.SANDBOX_ERROR, f"the episode's sandbox failed: {e.failed}"[:300])
         if failed_B[r] else v
         for r, e, v in zip(range(mine.start, mine.stop), opened, mine_verdicts)], mine, b)
    row = stats(turns_B, calls_B_T_O, tools, reason_B, rollout, cut_B, pmask_B_L)
    row["episode/turn_reward_mean"] = float(turn_rewards_B_R.sum() / b)
    row["steps"] = int(steps)
    return Generated(rollout, final, verdicts, row)


def _first_observations(sampler, glue, params, state, opened, mine, b, cut_B, put, pad_id):
    """What the environment showed at reset (`Episode.observation`, e.g. a workspace's
    listing), appended as ids before the first turn; the other rows start as they are. No
    environment showed any (every stateless one): nothing runs."""
    shown = [(r, e.observation) for r, e in zip(range(mine.start, mine.stop), opened)
             if e.observation and not e.failed]
    if not distributed.any_process(bool(shown)):
        return state
    o = sampler.observation_tokens
    room = min(o, state.tokens_B_R.shape[1] - 1)  # a slot is left for the first turn
    obs_B_O, len_B = np.full((b, o), pad_id, np.int32), np.zeros(b, np.int32)
    for r, text in shown:
        ids, cut = glue.ids(text, room)
        cut_B[r] += cut
        obs_B_O[r, :len(ids)], len_B[r] = ids, len(ids)
    obs_B_O, len_B = (distributed.gather_rows(x[mine]) for x in (obs_B_O, len_B))
    return sampler.extend(params, state, put(obs_B_O), put(len_B), put(np.zeros(b, bool)))


def gather_verdicts(local: list, mine: slice, b: int) -> list:
    """Each process's environment verdicts of its rows (None: the task's verifier judges) ->
    every row's, on every process (another process's rows keep status and fraction)."""
    status_B = np.full(b, -1, np.int32)
    fraction_B = np.full(b, -1.0, np.float32)
    for r, v in zip(range(mine.start, mine.stop), local):
        if v is not None:
            status_B[r], fraction_B[r] = int(v.status), v.fraction
    status_B, fraction_B = (distributed.gather_rows(x[mine]) for x in (status_B, fraction_B))
    out = [None if s < 0 else Verdict(Status(int(s)), "", fraction=float(f))
           for s, f in zip(status_B, fraction_B)]
    out[mine] = local
    return out


def rollout_stats(wait_s: float, wall_s: float, made: float, steps: int, rows: int,
                  call_s) -> dict:
    """What the devices did while episodes ran (either driver): the share of the wall clock
    the driver waited on the environment (the devices idle), the share of decode row-steps
    that made a policy token (`made` tokens in `steps` x `rows`), and each call's seconds
    (p50 / p99; a batch's calls each count its batch's time)."""
    call_s = np.asarray(call_s if len(call_s) else [0.0])
    return {"rollout/device_idle_share": wait_s / max(wall_s, 1e-9),
            "rollout/useful_row_steps": made / max(steps * rows, 1),
            "rollout/decode_steps": float(steps),
            "rollout/env_call_p50_s": float(np.percentile(call_s, 50)),
            "rollout/env_call_p99_s": float(np.percentile(call_s, 99))}


def stats(turns_B, calls_B_T_O, tools, reason_B, rollout: Rollout, cut_B, pmask_B_L) -> dict:
    """Per step: turns and calls per episode, each tool's error rate, malformed calls, the
    observations' share of the context, why episodes ended, cut observations."""
    b = len(turns_B)
    obs_tokens = float(((rollout.mask_B_R == 1) & (rollout.loss_mask_B_R == 0)).sum())
    context = float(rollout.mask_B_R.sum() + np.asarray(pmask_B_L).sum())
    by_outcome = calls_B_T_O.sum(axis=(0, 1))
    n_calls = int(by_outcome.sum())
    row = {"episode/turns_mean": float(np.mean(turns_B)),
           "episode/tool_calls_mean": n_calls / b,
           "episode/observation_share": obs_tokens / max(context, 1.0),
           "episode/observations_cut": float(np.sum(cut_B))}
    for i, outcome in enumerate(OUTCOMES[1:], 1):
        row[f"tool/{outcome}_rate"] = float(by_outcome[i]) / max(n_calls, 1)
    for t, tool in enumerate(tools):
        counts = calls_B_T_O[:, t].sum(axis=0)
        row[f"tool/{tool}/calls_mean"] = float(counts.sum()) / b
        row[f"tool/{tool}/error_rate"] = float(counts[OUTCOMES.index(TOOL_ERROR)]) / max(
            int(counts.sum()), 1)
    for i, reason in enumerate(REASONS[1:], 1):
        row[f"episode/ended_{reason}"] = float(np.mean(reason_B == i))
    return row
