"""What crosses a stage boundary, and the one legend of shape suffixes used in every name
(`rewards_P_G`, `tokens_B_R`, `logits_B_R_V`):

    P  prompts (problems) in a batch; in dynamic sampling, the groups kept
    G  samples per prompt (a group)
    B  sequences; in the loop B = P * G, in P_G order (a group's samples are contiguous)
    L  prompt slots (prompts are left-padded to L)
    R  response slots (responses are right-padded to R; the response budget)
    T  tokens of prompt ++ response, T = L + R
    S  KV-cache slots (the sampler's cache has S = L + R; the multi-turn one L + R + O)
    O  tokens of one observation an environment appends (multi-turn episodes)
    V  vocabulary;  D  hidden width;  F  MLP width
    Q  query heads;  K  key/value heads;  J = Q / K;  H  head dim
    U  optimizer updates in one RL step (epochs x minibatches);  N  decoder layers (blocks)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import numpy as np


class Status(enum.IntEnum):
    """Outcome of verifying one completion. Integer values are stable: they go into arrays."""

    PASS = 0
    """The answer was checked and is correct."""
    WRONG = 1
    """The answer was extracted and checked, and it is not correct."""
    UNPARSEABLE = 2
    """No answer could be extracted from the completion (bad format, truncated)."""
    SYNTAX_ERROR = 3
    """The candidate program does not parse."""
    RUNTIME_ERROR = 4
    """The candidate program raised (or exited non-zero) before producing its outputs."""
    TIMEOUT = 5
    """The check ran past its deadline and was killed."""
    MEMORY_LIMIT = 6
    """The candidate exceeded its memory limit."""
    OUTPUT_LIMIT = 7
    """The candidate wrote more output than allowed."""
    SANDBOX_ERROR = 8
    """The verifier itself failed (worker died, sandbox did not start): an infrastructure
    failure, never a verdict on the answer. Such samples are masked out of the loss."""


@dataclass(frozen=True)
class Verdict:
    status: Status
    detail: str = ""  # human-readable reason, e.g. "expected 12, got 13"
    latency_s: float = 0.0
    fraction: float = -1.0  # share of test cases passed (code); -1: not applicable
    # Named rewards a task's grader adds beside the status ((name, value) pairs, the names its
    # TaskSpec.reward_parts declares): reward components (rlvr_jax/rewards.py), weighted by
    # reward.weights, normalised one by one under algo.adv_estimator=gdpo.
    parts: tuple = ()


class Rollout(NamedTuple):
    """What the sampler returns (device arrays; host arrays once fetched). The attention mask
    and the loss mask are kept apart: in a multi-turn episode the tokens an environment wrote
    are attended to but are no actions, so they never enter the loss. In a single-turn
    rollout the two are equal."""

    tokens_B_R: Any  # int32 response tokens; pad after EOS
    logp_B_R: Any  # float32 log-prob of each sampled token under softmax(logits / temperature)
    mask_B_R: Any  # float32 attention: 1 for real response tokens up to and including EOS
    loss_mask_B_R: Any = None  # float32 1 for the policy's own sampled tokens (the actions)
    # float32 reward positions: an environment's per-turn rewards at the tokens that ended
    # the turns they answer (multi-turn episodes); None: none (zeros)
    turn_rewards_B_R: Any = None
    # int32 the params version each token was sampled under, where it varies within the
    # batch (streamed episodes carried across updates: streaming.py); None: the batch's own
    version_B_R: Any = None

    def host(self) -> "Rollout":
        """Host numpy arrays of fetched values (None stays None)."""
        return Rollout(*(None if x is None else np.asarray(x) for x in self))

    def turn_rewards(self) -> np.ndarray:
        """The per-turn rewards as a host array (zeros when there are none)."""
        if self.turn_rewards_B_R is None:
            return np.zeros(np.shape(self.mask_B_R), np.float32)
        return np.asarray(self.turn_rewards_B_R, np.float32)

    @staticmethod
    def concat(parts: "list[Rollout]") -> "Rollout":
        """Host rollouts of consecutive rows, as one (per-turn rewards: zeros where a part
        has none)."""
        fields = []
        for name, xs in zip(Rollout._fields, zip(*parts)):
            if all(x is None for x in xs):
                fields.append(None)
            elif name == "turn_rewards_B_R":
                fields.append(np.concatenate([p.turn_rewards() for p in parts]))
            else:
                fields.append(np.concatenate(xs))
        return Rollout(*fields)


class Generated(NamedTuple):
    """A batch of responses, whatever made them (one sampler call, or episodes with an
    environment: rlvr_jax/generate.py), from the sampler to the loss: per-token data inside
    `rollout`, per-row data beside it."""

    rollout: Rollout  # host arrays [B, R], every process's rows (per-turn rewards inside)
    texts: list  # what the task's verifier checks: this process's rows, or every row
    # the same rows: a verdict the episode's environment gave (its world's final state, or
    # SANDBOX_ERROR when its infrastructure failed), which overrules the task's verifier;
    # None where the verifier judges the text
    verdicts: list
    stats: dict  # episode metrics ({} for one turn)
    device: Any = None  # the sampler's device Rollout (one turn), for a reward model


class TrainBatch(NamedTuple):
    """One policy-gradient batch. Prompts are left-padded to L, responses right-padded to R."""

    tokens_B_T: Any  # int32 prompt ++ response
    input_mask_B_T: Any  # float32 1 for real (non-pad) tokens; attention keys and positions
    response_mask_B_R: Any  # float32 1 for response tokens that enter the loss
    old_logp_B_R: Any  # float32 sampler log-probs (the behaviour policy)
    advantages_B_R: Any  # float32 per token: an outcome advantage broadcast, or GAE
    returns_B_R: Any = None  # float32 value targets (PPO only)
    old_values_B_R: Any = None  # float32 critic values at sampling time (PPO only)
    # float32 the proximal policy's log-probs (the params at the update's start; the
    # decoupled loss with several updates per rollout, train_step fills it), else None
    prox_logp_B_R: Any = None


class SFTBatch(NamedTuple):
    """Demonstrations for the supervised warm start, laid out like TrainBatch."""

    tokens_B_T: Any
    input_mask_B_T: Any
    response_mask_B_R: Any


class PairBatch(NamedTuple):
    """B preference pairs: each side a prompt (left-padded to L) ++ response (right-padded to
    R), laid out like TrainBatch; DPO's reference log-probs (response sums) once per pair."""

    chosen_B_T: Any
    chosen_mask_B_T: Any
    chosen_response_mask_B_R: Any
    rejected_B_T: Any
    rejected_mask_B_T: Any
    rejected_response_mask_B_R: Any
    ref_logp_chosen_B: Any = None  # DPO only
    ref_logp_rejected_B: Any = None


class Groups(NamedTuple):
    """P groups of G samples each (host numpy), between scoring, dynamic sampling and the
    advantages."""

    prompt_P_G_L: np.ndarray  # int32, left-padded
    prompt_mask_P_G_L: np.ndarray  # int32
    tokens_P_G_R: np.ndarray  # int32 responses
    logp_P_G_R: np.ndarray  # float32 sampler log-probs
    mask_P_G_R: np.ndarray  # float32 generated tokens (attention)
    loss_mask_P_G_R: np.ndarray  # float32 tokens that enter the loss
    rewards_P_G: np.ndarray  # float32 outcome rewards (the verdict's, a reward model's)
    # float32 reward positions: an environment's per-turn reward at the token that ended the
    # turn (envs/base.py Reply.reward); zeros for one turn or without per-turn rewards.
    turn_rewards_P_G_R: np.ndarray
    # float32 [P, G, C]: each sample's reward components, in the run's order
    # (rewards.component_names); rewards_P_G is their weighted sum (the turns' at their
    # tokens). None: none recorded (a carry checkpointed before components existed).
    components_P_G_C: Optional[np.ndarray] = None

    @property
    def num(self) -> int:
        return self.rewards_P_G.shape[0]

    @property
    def returns_P_G(self) -> np.ndarray:
        """Each episode's undiscounted return: the outcome plus its per-turn rewards (what a
        sequence-level estimator such as GRPO sees; PPO's GAE places each at its token)."""
        return self.rewards_P_G + self.turn_rewards_P_G_R.sum(axis=-1)

    def take(self, idx) -> "Groups":
        return Groups(*(None if x is None else x[np.asarray(idx, dtype=np.int64)]
                        for x in self))

    def flat(self) -> "Groups":
        """Merge the group and sample axes: arrays [P * G, ...] in P_G order."""
        return Groups(*(None if x is None else x.reshape(-1, *x.shape[2:]) for x in self))


class StepTimes(NamedTuple):
    """Wall seconds of one RL step's phases (host clock)."""

    sample_s: float  # blocked on the sampler
    verify_s: float  # waiting for verdicts after the last chunk was sampled
    update_s: float  # advantages + update (+ PPO's prepare)
    step_s: float  # the whole step
    rl_step_s: float  # the jitted update alone (its FLOPs are counted: perf/mfu_update)


class TrainState(NamedTuple):
    step: Any  # int32 scalar: optimizer updates done
    params: Any
    opt_state: Any


class LoopState(NamedTuple):
    """Host-side loop position, checkpointed with the train state for exact resume."""

    step: int  # RL steps completed
    problems_consumed: int  # position in the training problem stream
    rng_key: np.ndarray  # uint32 key data of the run's base PRNG key
    kl_coef: float = 0.0  # current KL coefficient (moves under the adaptive controller)
    carry: Any = None  # dynamic sampling: informative groups kept for the next step (Groups)
