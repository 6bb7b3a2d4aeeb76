"""Mixed sources in one run (`task=mixed`, `verifier=routed`): JSONL / Parquet rows that each
name their verifier, checked row by row by the matching one (verify/routed.py), so one batch
can hold maths, code with unit tests, reasoning-gym items and exact-match answers.

A row's verifier kind is its `kind` field, else its `data_source` looked up in `task.sources`
(the config's table, e.g. `{my_math_set: math}`), else in `SOURCE_KINDS` below (verl's usual
names), else a reasoning-gym dataset's name. A row with none is a bad row, named by file:line
when the files are loaded (before the warm start), with the fix; so is a row whose `kind`
disagrees with where its `data_source` routes (a GSM8K-labelled row sent to a reasoning-gym
scorer), or whose reasoning-gym `dataset` is not its `data_source` when that names one. Row shapes:

  verl      {"data_source", "prompt": [{"role", "content"}, ...] | str,
             "reward_model": {"ground_truth": ...}, "extra_info"?: {...}}
  plain     {"prompt" | "question" | "problem" | "text": str, "kind"?, "data_source"?,
             "answer" | "tests" | "test_list" ...}  (MBPP's own rows load as they are)

What each kind reads as its ground truth:
  math            the answer (`#### N` or `\\boxed{}` text extracted), math-verify equivalence
  exact           the answer string, trimmed (verify/trusted.check_exact)
  code            the unit tests, in any shape data/code_tests.py reads (stdin/stdout, call
                  based, MBPP asserts, HumanEval check), run in the sandbox
  reasoning_gym   the answer and the row's `metadata` (or extra_info.metadata): reasoning-gym's
                  scorer for the dataset named by `dataset` / metadata.source_dataset /
                  data_source, in the sandbox

A row may name the environment its episodes run in (`environment`: python_repl, api, ...,
with `env.kind=routed env.routes=[...]`) and give that environment's context
(`environment_context`: {"setup": ..., "goal": ...}); a row whose environment judges its
final state (api, workspace) needs no answer (its environment's verdict overrules).

Per-source metrics: every problem carries its data_source (training: `source/<name>/...`;
evaluation: `by_source`). The stream and splits are the dataset task's (tasks/dataset.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Sequence

from rlvr_jax.config.choices import ConfigError, OnBadRow, _check
from rlvr_jax.data import code_tests, loaders
from rlvr_jax.tasks import dataset
from rlvr_jax.tasks.base import Job, check_pairs
from rlvr_jax.tasks.registry import TaskSpec, register
from rlvr_jax.verify.math import extract_answer, last_boxed
from rlvr_jax.verify.trusted import answer_in_tag

# verl's data_source names (its default_compute_score routes these) -> our verifier kinds.
SOURCE_KINDS = {
    **{s: "math" for s in ("openai/gsm8k", "gsm8k", "lighteval/MATH", "DigitalLearningGmbH/"
                           "MATH-lighteval", "HuggingFaceH4/MATH-500", "math", "math_dapo",
                           "aime", "aime24", "aime25", "numina_aops_forum", "numina_synthetic_math",
                           "numina_amc_aime", "numina_synthetic_amc", "numina_cn_k12",
                           "numina_olympiads", "deepscaler", "simplelr_math")},
    **{s: "code" for s in ("codecontests", "apps", "taco", "codeforces", "primeintellect",
                           "livecodebench", "mbpp", "humaneval", "code")},
    "exact": "exact",
}
KINDS = ("math", "code", "reasoning_gym", "exact")


@dataclass
class MixedTaskConfig:
    """Rows of several sources, each checked by its own verifier (tasks/mixed.py)."""

    name: str = "mixed"
    train_path: str = ""
    test_path: str = ""
    # data_source -> verifier kind (math | code | reasoning_gym | exact), over SOURCE_KINDS
    sources: Dict[str, str] = field(default_factory=dict)
    on_bad_row: OnBadRow = OnBadRow["raise"]
    instruction: str = ""  # appended to each row's last user message ("" : rows as they are)
    max_prompt_tokens: int = 512

    def check(self, key: str = "task") -> None:
        _check(bool(self.train_path) and bool(self.test_path), f"{key}.train_path",
               "task=mixed needs task.train_path and task.test_path")
        bad = {s: k for s, k in self.sources.items() if k not in KINDS}
        _check(not bad, f"{key}.sources", f"unknown verifier kinds {bad} (known: {KINDS})")
        _check(self.max_prompt_tokens >= 1, f"{key}.max_prompt_tokens", "must be >= 1")


@dataclass(frozen=True)
class MixedProblem:
    uid: str  # "<file>:<line>"
    messages: tuple  # ((role, content), ...)
    answer: str  # the reference answer as text ("" for code): majority voting
    data_source: str
    kind: str  # its verifier kind
    job: Any  # the kind's ground-truth fields (a JSON-able dict, frozen as items)
    environment: str = ""  # the environment its episodes run in (env.kind=routed), or ""
    env_context: str = "{}"  # JSON: that environment's {"setup": ..., "goal": ...}


def _messages(row: dict) -> tuple:
    prompt = next((row[k] for k in ("prompt", "question", "problem", "text") if k in row), None)
    if isinstance(prompt, str) and prompt.lstrip().startswith("[") and "reward_model" in row:
        prompt = json.loads(prompt)
    if isinstance(prompt, str):
        return (("user", prompt),)
    if isinstance(prompt, list) and prompt:
        return tuple((str(m["role"]), str(m["content"])) for m in prompt)
    raise ValueError("no prompt ('prompt' as text or messages, 'question', 'problem' or "
                     "MBPP's 'text')")


def _truth(row: dict):
    rm = row.get("reward_model")
    if isinstance(rm, dict) and "ground_truth" in rm:
        return rm["ground_truth"]
    for key in ("answer", "ground_truth", "tests"):
        if key in row:
            return row[key]
    return row  # MBPP / HumanEval rows hold their tests at the top level


def _gym_dataset(row: dict, source: str) -> str:
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    meta = _metadata(row)
    return str(row.get("dataset") or extra.get("dataset") or meta.get("source_dataset")
               or source)


def _metadata(row: dict) -> dict:
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    meta = row.get("metadata", extra.get("metadata", {}))
    if isinstance(meta, str):
        meta = json.loads(meta)
    return meta if isinstance(meta, dict) else {}


def _gym_names() -> set:
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        return set()
    return set(DATASETS)


def parse_row(row: object, where: str, default_source: str, sources: dict,
              gym_names: set) -> MixedProblem:
    row = loaders.json_object(row, where)
    try:
        source = str(row.get("data_source", default_source))
        by_source = sources.get(source) or SOURCE_KINDS.get(source) or (
            "reasoning_gym" if source in gym_names else None)
        environment = row.get("environment", "")
        if environment:
            from rlvr_jax.envs import registry

            if not isinstance(environment, str):
                raise ValueError("'environment' must be an environment's name")
            try:
                registry.check_kind(environment, "environment")
            except ConfigError as e:  # one the install does not know: the row's error
                raise ValueError(str(e).replace("config key 'environment': ", "")) from None
            # A row judged by its environment's final state needs no verifier of its own.
            by_source = by_source or ("exact" if "answer" not in row else None)
        kind = row.get("kind") or by_source
        if row.get("kind") and "data_source" in row and by_source and by_source != kind:
            # e.g. a GSM8K-labelled row routed to a reasoning-gym scorer that evals answers
            raise ValueError(f"kind {kind!r} disagrees with data_source {source!r}, which "
                             f"routes to {by_source!r}: fix one of them (or map the source "
                             f"with task.sources.{source}=KIND)")
        if kind is None:
            raise ValueError(f"data_source {source!r} has no verifier: give the row a 'kind' "
                             f"({', '.join(KINDS)}) or map it with task.sources.{source}=KIND "
                             "(known sources: rlvr_jax/tasks/mixed.py SOURCE_KINDS)")
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
        messages, truth = _messages(row), _truth(row)
        if kind == "math":
            text = str(truth)
            gold = (text.rsplit("####", 1)[1].strip().replace(",", "") if "####" in text
                    else last_boxed(text) or text.strip())
            answer, job = gold, {"gold": gold}
        elif kind == "exact":
            truth = truth if truth is not row else "(the environment's final state decides)"
            answer, job = str(truth).strip(), {"answer": str(truth).strip()}
        elif kind == "code":
            answer, job = "", code_tests.tests_of(truth, where)
        else:
            name = _gym_dataset(row, source)
            if source in gym_names and name != source:
                raise ValueError(f"the row's reasoning-gym dataset {name!r} disagrees with "
                                 f"its data_source {source!r}: fix one of them")
            if name not in gym_names:
                raise ValueError(f"reasoning-gym has no dataset {name!r} (or the tasks extra "
                                 "is not installed: pip install -e '.[tasks]')")
            answer = str(truth).strip()
            job = {"dataset": name, "entry": {"question": messages[-1][1], "answer": answer,
                                              "metadata": _metadata(row)}}
        if not answer and kind != "code":
            raise ValueError("empty answer")
        json.dumps(job)  # what crosses to a worker is JSON
        context = row.get("environment_context", {})
        if not isinstance(context, dict) or set(context) - {"setup", "goal"}:
            raise ValueError("'environment_context' must be {\"setup\": {...}, \"goal\": ...}")
        context_json = json.dumps(context)
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
        raise loaders.row_error(e, where) from None
    return MixedProblem(where, messages, answer, source, kind, tuple(sorted(job.items())),
                        environment, context_json)


class MixedTask(dataset.DatasetTask):
    """The dataset task's stream and splits, with each row's own verifier kind."""

    @property
    def verifier_kinds(self) -> tuple[str, ...]:
        """The kinds its rows need (a routed verifier makes them at start)."""
        return tuple(sorted({p.kind for p in (*self.train, *self.test)}))

    @staticmethod
    def answer_of(completion: str) -> str | None:
        return answer_in_tag(completion) or extract_answer(completion)

    @staticmethod
    def tool_context(problem: MixedProblem) -> dict:
        """The row's environment and its context (env.kind=routed), else nothing."""
        if not problem.environment:
            return {}
        return {**json.loads(problem.env_context), "environment": problem.environment}

    @staticmethod
    def verify_jobs(problems: Sequence[MixedProblem], completions: Sequence[str]) -> list[Job]:
        check_pairs(problems, completions)
        return [{"kind": p.kind, **dict(p.job), "completion": c}
                for p, c in zip(problems, completions)]


def build(t: MixedTaskConfig, tokenizer) -> MixedTask:
    sources, gym = dict(t.sources), _gym_names()
    read = lambda path, on_bad_row: loaders.load_rows(
        path, lambda row, where, src: parse_row(row, where, src, sources, gym), on_bad_row)
    loaded = dataset.load(t.train_path, t.test_path, "auto", t.on_bad_row, t.max_prompt_tokens,
                          tokenizer, t.instruction, read=read)
    return MixedTask(loaded.train, loaded.test, loaded.render, loaded.longest_prompt)


SPEC = register(TaskSpec("mixed", MixedTaskConfig, build, verifiers=("routed",),
                         demonstrations=False))
