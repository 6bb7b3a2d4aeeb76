"""The task registry: each task module declares, in one place, its config schema (a dataclass
with `name` and `check`), how to build the task from it, and the verifier kinds that can check
its jobs (`register(TaskSpec(...))` at import). The config (Hydra's ConfigStore, validation),
`tasks.build` and the docs read this table; nothing else names a task.

Discovery: every module of the `rlvr_jax.tasks` package (a new file there is found), and every
module named by a `rlvr_jax.tasks` entry point of an installed package (a user's own tasks,
outside this repository):

    [project.entry-points."rlvr_jax.tasks"]
    my_task = "my_package.my_task"

A task module imports nothing heavy at the top (its schema must load wherever a config is
composed); optional dependencies (reasoning-gym) are imported when the task is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rlvr_jax import plugins


@dataclass(frozen=True)
class TaskSpec:
    name: str  # task.name, and conf/task/<name>.yaml's `<name>_schema`
    schema: type  # the config dataclass: fields with defaults, `check(key)` naming bad keys
    build: Callable[[Any, Any], Any]  # (task config, tokenizer) -> Task (tasks/base.py)
    verifiers: tuple[str, ...]  # verifier.kind values that can check its jobs (first: default)
    demonstrations: bool = True  # has warm-start demonstrations (else model.path is needed)
    environment: str = ""  # the env.kind its episodes need (its verdicts come from it), or ""
    # Named rewards its grader returns beside the status (Verdict.parts): reward components
    # (rlvr_jax/rewards.py), weighted by reward.weights.<name> [0: logged only].
    reward_parts: tuple[str, ...] = ()


_TASKS = plugins.Table("task", "rlvr_jax.tasks", "rlvr_jax.tasks")


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task (at its module's import). A second task of the same name is an error."""
    return _TASKS.add(spec.name, spec, spec.schema.__module__)


def specs() -> dict[str, TaskSpec]:
    """Every registered task, by name."""
    return _TASKS.all()


@dataclass(frozen=True)
class EvalSetSpec:
    """A held-out set beside the task's own (`eval.extra_sets`): a Task whose `heldout_set`
    is the set, and the verifier kind that checks it."""

    name: str
    build: Callable[[Any], Any]  # tokenizer -> Task (evaluation only)
    verifier: str


_EVAL_SETS: dict[str, EvalSetSpec] = {}


def register_eval_set(name: str, build: Callable[[Any], Any], verifier: str) -> EvalSetSpec:
    _EVAL_SETS[name] = EvalSetSpec(name, build, verifier)
    return _EVAL_SETS[name]


def eval_sets() -> dict[str, EvalSetSpec]:
    """Every registered evaluation set, by name (their modules are the tasks')."""
    _TASKS.all()
    return dict(_EVAL_SETS)


def get(name: str, key: str = "task.name") -> TaskSpec:
    """The task named `name`, or a ConfigError naming `key` and the known tasks."""
    return _TASKS.get(name, key)
