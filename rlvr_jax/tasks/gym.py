"""reasoning-gym's procedural datasets as a task (`task=reasoning_gym`; the optional extra
`pip install -e '.[tasks]'`): one dataset or a weighted mixture, each with its own generator
config, scored by reasoning-gym's own scorer in the sandbox (verify/gym_score.py).

Streams: a problem is (dataset, index) of a generator made with `split_seed`; its item is
generated on demand (reasoning-gym's datasets are virtual: item i is a function of the seed
and i, and, for a few generators, of the process's string-hash seed: so the job carries the
entry the prompt was made from whenever it is JSON, and the sandbox regenerates only the rest). Batch k of the training stream draws datasets by weight and indices from
rng([seed, k]), so resume is exact. Held-out problems are disjoint from every training batch
by a salted hash of the dataset's name and the question's text (tasks/base.ProceduralSplit): a
question is held out or trained on, never both, even where two indices generate it.

Prompts: the question and `instruction` (ask for the answer inside <answer></answer>); the
answer is read from the last such tag. Prompts past `max_prompt_tokens` are redrawn (counted
at build on a fixed probe; the prompt budget is the longest prompt the probe saw).

Warm-start demonstrations: `<answer>{oracle}</answer>`; a wrong one gives another item's
answer of the same dataset (an integer answer is moved by 1..max_offset instead), so a
demonstration is wrong the way a confused model is, in the right format.

Before training, each dataset's scorer must give its own oracle answers full marks (scored on
the host: the oracle is the generator's output, never a model's); else the config is
refused, naming the dataset.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Sequence

import numpy as np

from rlvr_jax.config.choices import ConfigError, _check
from rlvr_jax.tasks.base import Job, ProceduralSplit, check_pairs
from rlvr_jax.tasks.registry import TaskSpec, register
from rlvr_jax.verify.trusted import answer_in_tag

SIZE = 2 ** 31 - 1  # the generators' virtual size (verify/gym_score.py uses the same)
PROBE = 512  # problems drawn at build to size the prompt budget


@dataclass
class GymDatasetConfig:
    name: str = "chain_sum"  # a reasoning-gym dataset (reasoning_gym.factory.DATASETS)
    weight: float = 1.0  # its share of the mixture (normalised over the datasets)
    config: Dict[str, Any] = field(default_factory=dict)  # its generator's config fields


@dataclass
class ReasoningGymTaskConfig:
    """reasoning-gym datasets (tasks/gym.py), scored in the sandbox (`verifier=reasoning_gym`)."""

    name: str = "reasoning_gym"
    datasets: List[GymDatasetConfig] = field(default_factory=lambda: [GymDatasetConfig()])
    heldout_fraction: float = 0.1  # share of questions held out (by a salted hash)
    split_seed: int = 0  # the generators' seed, and the hash's salt
    instruction: str = "Give the final answer inside <answer></answer>."
    max_prompt_tokens: int = 256  # longer prompts are redrawn

    def check(self, key: str = "task") -> None:
        _check(len(self.datasets) > 0, f"{key}.datasets", "must name at least one dataset")
        for i, d in enumerate(self.datasets):
            _check(d.weight > 0, f"{key}.datasets[{i}].weight", "must be > 0")
        _check(0.0 < self.heldout_fraction < 1.0, f"{key}.heldout_fraction", "must be in (0, 1)")
        _check(self.max_prompt_tokens >= 1, f"{key}.max_prompt_tokens", "must be >= 1")


@dataclass(frozen=True)
class GymProblem:
    dataset: str  # the dataset's name: also the problem's data source (per-source metrics)
    index: int
    question: str
    answer: str  # the oracle answer (demonstrations, majority voting)
    # The generated entry as JSON ("" when its metadata does not round-trip through JSON):
    # the scorer gets the very entry the prompt was made from. Regenerating it in the sandbox
    # is not enough: some generators depend on the process's string-hash seed (e.g.
    # polynomial_multiplication), so another process makes another question for the index.
    entry: str = field(default="", compare=False, repr=False)

    @property
    def data_source(self) -> str:
        return self.dataset


def _import():
    try:
        import reasoning_gym
    except ImportError:
        raise ConfigError("config key 'task.name': task=reasoning_gym needs the optional extra "
                          "(pip install -e '.[tasks]', or pip install reasoning-gym)") from None
    return reasoning_gym


@functools.lru_cache(maxsize=None)
def _generator(name: str, config: tuple, seed: int):
    return _import().create_dataset(name, seed=seed, size=SIZE, **dict(config))


@dataclass(frozen=True)
class ReasoningGymTask(ProceduralSplit[GymProblem]):
    names: tuple[str, ...]
    configs: tuple[tuple, ...]  # each dataset's generator config, as sorted items
    weights: tuple[float, ...]
    heldout_fraction: float
    split_seed: int
    instruction: str
    count_tokens: Callable[[str], int]
    max_prompt_tokens: int

    heldout_salt: ClassVar[int] = 0x6E7

    def key(self, p: GymProblem) -> str:
        return f"{p.dataset}\0{p.question}"

    def item(self, d: int, index: int) -> GymProblem:
        entry = _generator(self.names[d], self.configs[d], self.split_seed)[index]
        return GymProblem(self.names[d], int(index), str(entry["question"]),
                          str(entry["answer"]), _as_json(entry))

    def draw(self, rng: np.random.Generator, count: int) -> list[GymProblem]:
        p = np.asarray(self.weights) / np.sum(self.weights)
        which = rng.choice(len(self.names), size=count, p=p)
        index = rng.integers(0, SIZE, size=count)
        out = [self.item(int(d), int(i)) for d, i in zip(which, index)]
        return [q for q in out if self.count_tokens(self.prompt(q)) <= self.max_prompt_tokens]

    def prompt(self, p: GymProblem) -> str:
        return f"{p.question}\n{self.instruction}\n"

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        rng = np.random.default_rng([self.split_seed, 0xB0D6E7])
        probe = self.draw(rng, PROBE)
        return max(count_tokens(self.prompt(q)) for q in probe) if probe else 1

    def demonstration(self, p: GymProblem, wrong: bool, rng: np.random.Generator,
                      max_offset: int) -> str:
        answer = p.answer
        if wrong:
            if re.fullmatch(r"-?\d+", answer):
                answer = str(int(answer) + int(rng.integers(1, max_offset + 1))
                             * (1 if rng.random() < 0.5 else -1))
            else:
                d = self.names.index(p.dataset)
                for _ in range(8):  # another item's answer, unless they all agree
                    other = self.item(d, int(rng.integers(0, SIZE))).answer
                    if other != p.answer:
                        answer = other
                        break
        return f"<answer>{answer}</answer>"

    @staticmethod
    def answer_of(completion: str) -> str | None:
        return answer_in_tag(completion)

    def verify_jobs(self, problems: Sequence[GymProblem], completions: Sequence[str]) -> list[Job]:
        check_pairs(problems, completions)
        config = {p: dict(self.configs[self.names.index(p)]) for p in self.names}
        return [{"dataset": p.dataset, "config": config[p.dataset], "seed": self.split_seed,
                 "index": p.index, "completion": c,
                 **({"entry": json.loads(p.entry)} if p.entry else {})}
                for p, c in zip(problems, completions)]


def _as_json(entry: dict) -> str:
    """The entry as JSON text if it comes back equal (tuples, sets or objects in its metadata
    do not: then "", and the sandbox regenerates it)."""
    try:
        text = json.dumps(entry, sort_keys=True)
        return text if json.loads(text) == entry else ""
    except (TypeError, ValueError, RecursionError):
        return ""


def _frozen(config: dict) -> tuple:
    return tuple(sorted((str(k), v if not isinstance(v, list) else tuple(v))
                        for k, v in dict(config).items()))


def build(t: ReasoningGymTaskConfig, tokenizer) -> ReasoningGymTask:
    """The task, after checking each dataset: a known name, a config its generator takes, and
    a scorer that gives the dataset's own answers full marks (on the host: oracle answers
    only). Each failure names its key."""
    rg = _import()
    from reasoning_gym.factory import DATASETS

    names, configs = [], []
    for i, d in enumerate(t.datasets):
        key = f"task.datasets[{i}]"
        _check(d.name in DATASETS, f"{key}.name", f"unknown reasoning-gym dataset {d.name!r} "
               f"(e.g. {', '.join(sorted(DATASETS)[:8])}, ...)")
        frozen = _frozen(d.config)
        try:
            gen = _generator(d.name, frozen, t.split_seed)
            entries = [gen[j] for j in range(3)]
        except Exception as e:  # the generator's own check of its config
            raise ConfigError(f"config key '{key}.config': {d.name} rejects it: "
                              f"{type(e).__name__}: {e}") from None
        for entry in entries:
            score = rg.get_score_answer_fn(d.name)(entry["answer"], entry)
            _check(score == 1.0, f"{key}.name", f"{d.name}'s scorer gives its own answer "
                   f"{score!r}, not 1.0: it cannot be trained on as configured")
        names.append(d.name)
        configs.append(frozen)
    count = ((lambda text: len(tokenizer.encode(text, add_special_tokens=False)))
             if tokenizer is not None else len)
    task = ReasoningGymTask(tuple(names), tuple(configs), tuple(d.weight for d in t.datasets),
                            t.heldout_fraction, t.split_seed, t.instruction, count,
                            t.max_prompt_tokens)
    kept = len(task.draw(np.random.default_rng([t.split_seed, 0x5EE]), PROBE))
    _check(kept >= PROBE // 4, "task.max_prompt_tokens",  # else the stream would stall
           f"only {kept} of {PROBE} drawn prompts fit in {t.max_prompt_tokens} tokens")
    return task


SPEC = register(TaskSpec("reasoning_gym", ReasoningGymTaskConfig, build,
                         verifiers=("reasoning_gym",)))
