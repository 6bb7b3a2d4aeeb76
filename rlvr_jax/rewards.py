"""Verdicts -> rewards. One table per scheme maps each status to a reward; nothing else decides
what a status is worth."""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from rlvr_jax.types import Status, Verdict

_FAILURES = (Status.WRONG, Status.UNPARSEABLE, Status.SYNTAX_ERROR, Status.RUNTIME_ERROR,
             Status.TIMEOUT, Status.MEMORY_LIMIT, Status.OUTPUT_LIMIT)

# SANDBOX_ERROR is in no table: it is an infrastructure failure, and such samples are masked
# out of the loss (weight 0), never scored (see `loss_weights`).
REWARD_TABLES: Mapping[str, Mapping[Status, float]] = {
    # 1 for a correct answer, 0 otherwise (DeepSeek-R1 style accuracy reward).
    "binary": {Status.PASS: 1.0, **{s: 0.0 for s in _FAILURES}},
    # +1 / -1, with any failure punished like a wrong answer.
    "signed": {Status.PASS: 1.0, **{s: -1.0 for s in _FAILURES}},
    # Per-failure penalty: a well-formed wrong answer beats malformed output. Gives a gradient
    # to a policy that is never right yet (e.g. a fresh model learning the answer format).
    "format_penalty": {Status.PASS: 1.0, **{s: -1.0 for s in _FAILURES}, Status.WRONG: 0.0},
    # Graded per failure kind, as in code-RL work: a program that does not even parse is worse
    # than one that crashes, which is worse than a wrong or slow one.
    "code_penalty": {Status.PASS: 1.0, Status.WRONG: -1.0, Status.UNPARSEABLE: -5.0,
                     Status.SYNTAX_ERROR: -5.0, Status.RUNTIME_ERROR: -3.0,
                     Status.TIMEOUT: -1.0, Status.MEMORY_LIMIT: -1.0, Status.OUTPUT_LIMIT: -1.0},
}


# Partial credit: the table's value times the share of tests passed (Verdict.fraction, set by
# the code verifier), so 3 of 5 tests on a WRONG program earns 0.6.
REWARD_TABLES["graded"] = {Status.PASS: 1.0, Status.WRONG: 1.0,
                           **{s: 0.0 for s in _FAILURES if s != Status.WRONG}}
GRADED = {"graded"}


# Reward components: each sample's reward is a weighted sum of named parts (reward.weights
# overrides these defaults; a task's own parts, TaskSpec.reward_parts, default to 0: logged,
# not rewarded, until weighted). `learned` takes reward.reward_model_weight.
#   correct  the verdict's value in the scheme's table (what the reward was before parts)
#   format   1 when an answer could be read (the status is not UNPARSEABLE), else 0
#   learned  the reward model's score (reward.source reward_model / combined)
#   length   DAPO's overlong penalty (algo.dapo.overlong_buffer_tokens > 0)
#   turns    an environment's per-turn rewards, summed (they stay at their tokens for GAE)
DEFAULT_WEIGHTS = {"correct": 1.0, "format": 0.0, "learned": 1.0, "length": 1.0, "turns": 1.0}


def component_names(*, source: str, overlong: bool, episodes: bool,
                    parts: Sequence[str] = ()) -> tuple[str, ...]:
    """The run's components, in the order of Groups.components_P_G_C's last axis."""
    names = ["correct", "format", *parts] if source != "reward_model" else []
    names += ["learned"] * (source != "verifier") + ["length"] * overlong
    return tuple(names + ["turns"] * episodes)


def component_weights(names: Sequence[str], overrides: Mapping[str, float],
                      learned_weight: float, key: str = "reward.weights") -> tuple[float, ...]:
    """Each component's weight: `overrides`, else the default (learned: `learned_weight`;
    a task's part: 0). A key naming no component of this run is refused, naming them."""
    from rlvr_jax.config.choices import ConfigError

    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ConfigError(f"config key '{key}.{unknown[0]}': this run has no such reward "
                          f"component (its components: {', '.join(names)})")
    default = dict(DEFAULT_WEIGHTS, learned=learned_weight)
    return tuple(float(overrides.get(n, default.get(n, 0.0))) for n in names)


def formatted(verdicts: Sequence[Verdict]) -> np.ndarray:
    """float32 [B]: 1 where an answer could be read (the `format` component)."""
    return np.array([v.status != Status.UNPARSEABLE for v in verdicts], np.float32)


def part(verdicts: Sequence[Verdict], name: str) -> np.ndarray:
    """float32 [B]: each verdict's part `name` (0 where its grader gave none: a sandbox error,
    a limit hit before the grader ran)."""
    return np.array([dict(v.parts).get(name, 0.0) for v in verdicts], np.float32)


def component_summary(names: Sequence[str], components_P_G_C: np.ndarray) -> dict:
    """`reward/part/<name>`: each component's batch mean."""
    c = np.asarray(components_P_G_C, np.float32).reshape(-1, len(names))
    return {f"reward/part/{n}": float(c[:, i].mean()) for i, n in enumerate(names)}


def from_verdicts(verdicts: Sequence[Verdict], scheme: str) -> np.ndarray:
    """float32 rewards, one per verdict, in order; 0 for a sandbox error (masked anyway)."""
    table = REWARD_TABLES[scheme]
    if scheme in GRADED:
        share = lambda v: (v.fraction if v.fraction >= 0 else float(v.status == Status.PASS))
        return np.array([table.get(v.status, 0.0) * share(v) for v in verdicts], np.float32)
    return np.array([table.get(v.status, 0.0) for v in verdicts], dtype=np.float32)


def loss_weights(verdicts: Sequence[Verdict]) -> np.ndarray:
    """float32 [B]: 0 for samples whose verification failed for infrastructure reasons."""
    return np.array([v.status != Status.SANDBOX_ERROR for v in verdicts], dtype=np.float32)


class InfrastructureFailing(RuntimeError):
    """Too many of a step's samples failed for infrastructure reasons to train on it."""


def breaker(verdicts: Sequence[Verdict], max_share: float, step: int) -> None:
    """The circuit breaker (`verifier.max_infra_share`): more than `max_share` of the step's
    samples masked as sandbox errors (a lost machine, a broken sandbox) stops the run with
    one line, before the update trains on what is left; the last checkpoint resumes it."""
    failed = [v for v in verdicts if v.status == Status.SANDBOX_ERROR]
    share = len(failed) / max(len(verdicts), 1)
    if share > max_share:
        raise InfrastructureFailing(
            f"step {step + 1}: {len(failed)} of {len(verdicts)} samples were sandbox errors "
            f"({share:.0%} > verifier.max_infra_share={max_share:g}), e.g. "
            f"{failed[0].detail[:160]!r}: the infrastructure is failing, so the run stopped "
            "before training on this batch; fix it and rerun the command to resume from the "
            "last checkpoint")


def status_counts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """Count of every status (zeros included, so logged series never have gaps)."""
    counts = Counter(v.status for v in verdicts)
    return {f"status/{s.name.lower()}": int(counts.get(s, 0)) for s in Status}


def summary(verdicts: Sequence[Verdict], rewards_P_G: np.ndarray) -> dict[str, float]:
    """Per-step reward metrics: status counts, accuracy (share of PASS), mean reward, and the
    share of groups whose rewards are all equal (they carry no GRPO signal)."""
    return {
        **status_counts(verdicts),
        "reward/accuracy": float(np.mean([v.status == Status.PASS for v in verdicts])),
        "reward/mean": float(rewards_P_G.mean()),
        "reward/groups_all_equal": float(np.mean(rewards_P_G.std(axis=1) == 0)),
        "verifier/latency_p50_s": float(np.percentile([v.latency_s for v in verdicts], 50)),
        "verifier/latency_p95_s": float(np.percentile([v.latency_s for v in verdicts], 95)),
    }


def by_source(sources_B: Sequence, verdicts: Sequence[Verdict],
              rewards_B: np.ndarray) -> dict[str, float]:
    """Per data source (mixed-source tasks): sequences, mean reward, accuracy and status
    counts, under `source/<name>/`. Empty when the batch's problems name no source or one."""
    names = sorted({str(s) for s in sources_B if s is not None})
    if len(names) < 2:
        return {}
    rewards_B = np.asarray(rewards_B, np.float32).reshape(-1)
    row: dict[str, float] = {}
    for name in names:
        idx = [i for i, s in enumerate(sources_B) if s is not None and str(s) == name]
        vs = [verdicts[i] for i in idx]
        row[f"source/{name}/sequences"] = float(len(idx))
        row[f"source/{name}/reward_mean"] = float(rewards_B[idx].mean())
        row[f"source/{name}/accuracy"] = float(np.mean([v.status == Status.PASS for v in vs]))
        row |= {f"source/{name}/{k}": float(v) for k, v in status_counts(vs).items()}
    return row


def learned_summary(verdicts: Sequence[Verdict], learned_B: np.ndarray | None) -> dict:
    """The reward model's scores of a batch, overall and split by the gold verdict: the proxy
    a learned reward optimises, and how far it still tracks the truth."""
    if learned_B is None:
        return {}
    ok_B = np.array([v.status == Status.PASS for v in verdicts])
    row = {"reward/learned_mean": float(learned_B.mean()),
           "reward/learned_std": float(learned_B.std())}
    for name, sel in (("correct", ok_B), ("wrong", ~ok_B)):
        if sel.any():
            row[f"reward/learned_mean_{name}"] = float(learned_B[sel].mean())
    return row


def impute_invalid(rewards_P_G: np.ndarray, weights_P_G: np.ndarray) -> np.ndarray:
    """Rewards with each weight-0 (sandbox error) sample replaced by the mean reward of the
    valid samples of its group (0 if none), so a verifier failure moves no group baseline; the
    sample itself is out of the loss anyway."""
    valid = weights_P_G > 0
    n = valid.sum(axis=1, keepdims=True)
    mean = np.where(n > 0, (rewards_P_G * valid).sum(axis=1, keepdims=True) / np.maximum(n, 1), 0)
    return np.where(valid, rewards_P_G, mean).astype(np.float32)
