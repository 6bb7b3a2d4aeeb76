"""What the loop, the warm start and evaluation ask of a task (`Task`), and the hash-disjoint
train / held-out split that the procedural tasks share (`ProceduralSplit`).

A task turns problems into prompt text and (problem, completion) pairs into verify jobs: plain
JSON-able dicts that a verifier of the task's kind checks (`rlvr_jax.verify.make_verifier`).
Nothing here knows about tokens or devices, and nothing in `verify/` imports a task.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Generic, Protocol, Sequence, TypeVar

import numpy as np

ProblemT = TypeVar("ProblemT")
Job = dict  # one verify job, JSON-able (its fields depend on the verifier kind)


class Task(Protocol[ProblemT]):
    """A family of problems with verifiable answers."""

    def train_batch(self, seed: int, batch_index: int, count: int) -> list[ProblemT]:
        """Batch `batch_index` of the training stream: a pure function of its arguments, so a
        resumed run that asks for batch k gets exactly what an uninterrupted run got."""
        ...

    def heldout_set(self, count: int) -> list[ProblemT]:
        """A fixed list of held-out problems, disjoint from every training batch."""
        ...

    def prompt(self, problem: ProblemT) -> str:
        """The prompt text (chat template applied where the task uses one)."""
        ...

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        """Tokens in the longest prompt the task can produce (the sampler's prompt slots)."""
        ...

    def verify_jobs(self, problems: Sequence[ProblemT],
                    completions: Sequence[str]) -> list[Job]:
        """One job per (problem, completion) pair, in order."""
        ...

    def answer_of(self, completion: str) -> str | None:
        """The final answer a completion gives (for majority voting), or None."""
        ...
    # A task whose verdict is its world's final state (an environment's check) has no answer
    # in the text: `answer_of = None`, and evaluations report no maj@k for it.

    def demonstration(self, problem: ProblemT, wrong: bool, rng: np.random.Generator,
                      max_offset: int) -> str:
        """A warm-start response for `problem`; a `wrong` one is off by 1..max_offset.
        Tasks without demonstrations raise `NoDemonstrations`."""
        ...


# Optional, for multi-turn tool use (rlvr_jax/envs/): `tool_demonstration(problem, rng) -> (tool,
# arguments, the tool's output, the final answer)`, a warm-start episode that calls a tool (or
# {"calls": [(tool, arguments, output), ...], "answer": ...}, one that calls several);
# `tool_context(problem) -> {"_key": value}`, what the tools of an episode on it are given
# (a database, the visible tests; verify/toolbox.py).


class JudgedByItsWorld:
    """A task whose verdict is its environment's final-state check (TaskSpec.environment
    names the environment): the verifier's jobs are placeholders that the environment's
    verdict overrules (generate.overrule), and no answer is in the text to vote on (no
    maj@k)."""

    answer_of = None

    def verify_jobs(self, problems: Sequence, completions: Sequence[str]) -> list[Job]:
        check_pairs(problems, completions)
        return [{"completion": "", "answer": 0} for _ in problems]


class NoDemonstrations(ValueError):
    """The task has no warm-start demonstrations (start from model.path, or warmup.steps=0)."""


def check_pairs(problems: Sequence, completions: Sequence[str]) -> None:
    if len(problems) != len(completions):
        raise ValueError(f"{len(problems)} problems but {len(completions)} completions")


def in_heldout(text: str, split_seed: int, heldout_fraction: float) -> bool:
    """Whether a problem (by its text) is held out: a salted hash below the fraction, so no
    training batch can contain a held-out problem, whatever the seed or step."""
    digest = hashlib.blake2b(f"{split_seed}:{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64 < heldout_fraction


class ProceduralSplit(Generic[ProblemT]):
    """Train / held-out streams of a procedural task, from `draw(rng, count)` (problems of
    either split) and `key(problem)` (its text, which decides its split). Subclasses set
    `split_seed`, `heldout_fraction` and `heldout_salt` (the held-out set's rng stream)."""

    split_seed: int
    heldout_fraction: float
    heldout_salt: int = 0

    def draw(self, rng: np.random.Generator, count: int) -> list[ProblemT]:
        raise NotImplementedError

    def key(self, problem: ProblemT) -> str:
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, heldout: bool, count: int) -> list[ProblemT]:
        """Rejection-sample `count` problems from the requested split."""
        out: list[ProblemT] = []
        while len(out) < count:
            out += [p for p in self.draw(rng, count)
                    if in_heldout(self.key(p), self.split_seed, self.heldout_fraction) == heldout]
        return out[:count]

    def train_batch(self, seed: int, batch_index: int, count: int) -> list[ProblemT]:
        return self.sample(np.random.default_rng([seed, batch_index]), heldout=False, count=count)

    def heldout_set(self, count: int) -> list[ProblemT]:
        """`count` distinct held-out problems, the same for every run of this task."""
        rng = np.random.default_rng([self.split_seed, self.heldout_salt])
        seen: dict[str, ProblemT] = {}
        stale = 0  # rounds in a row that found no new problem: the split is exhausted
        for _ in range(200):
            before = len(seen)
            for p in self.sample(rng, heldout=True, count=count):
                seen.setdefault(self.key(p), p)
            if len(seen) >= count:
                return list(seen.values())[:count]
            stale = stale + 1 if len(seen) == before else 0
            if stale == 3:
                break
        raise ValueError(f"task has fewer than {count} distinct held-out problems; "
                         "lower eval.num_problems or raise task.heldout_fraction")


def repeat_each(items: Sequence, times: int) -> list:
    """[a, b] x 2 -> [a, a, b, b]: the P_G order used everywhere (groups are contiguous)."""
    return [item for item in items for _ in range(times)]


def tool_contexts(task, problems: Sequence) -> list[dict]:
    """Each problem's context for tools (`tool_context`; {} for a task without one)."""
    context = getattr(task, "tool_context", None)
    return [context(p) if context else {} for p in problems]
