"""Task directories in the Harbor layout (`task=harbor`, with `env.kind=harbor`):

    my-task/
      instruction.md      the prompt
      task.toml           optional: [verifier] timeout_sec, [environment] docker_image
      environment/        files seeded into the agent's /app (a Dockerfile there may only
                          FROM / WORKDIR / COPY: anything else needs an image built)
      tests/test.sh       run on the final /app in a fresh verification sandbox; writes the
                          reward to /logs/verifier/reward.txt (1 passes) or reward.json
      solution/solve.sh   optional: the reference solution (`check_solutions`)

`task.path` is one such directory or a directory of them. No container images are built
here: a task that needs one (a docker_image, a Dockerfile that runs or installs anything) is
refused at load with one line naming the task and why, and so is a task without
tests/test.sh. The episode runs in the `harbor` environment (envs/worlds/harbor.py), whose
final-state verdict is the task's reward; the tests never enter the agent's session.

    python -m rlvr_jax.tasks.harbor DIR   # each task's own solution must pass its tests
"""

from __future__ import annotations

import base64
import os
import sys
import tomllib
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import numpy as np

from rlvr_jax.config.choices import ConfigError, _check
from rlvr_jax.tasks.base import JudgedByItsWorld, in_heldout
from rlvr_jax.tasks.registry import TaskSpec, register

_DOCKER_OK = ("FROM", "WORKDIR", "COPY", "ADD", "#", "")
MAX_FILE_BYTES = 1 << 20  # per seeded or test file


@dataclass
class HarborTaskConfig:
    """Harbor-layout task directories (tasks/harbor.py), run in env.kind=harbor."""

    name: str = "harbor"
    path: str = ""  # a task directory, or a directory of task directories
    heldout: Optional[List[str]] = None  # held-out task names (default: a hash split)
    heldout_fraction: float = 0.2

    def check(self, key: str = "task") -> None:
        _check(bool(self.path), f"{key}.path", "task=harbor needs task.path (a directory of "
                                               "Harbor task directories)")
        _check(0.0 <= self.heldout_fraction < 1.0, f"{key}.heldout_fraction",
               "must be in [0, 1)")


@dataclass(frozen=True)
class HarborProblem:
    name: str
    instruction: str
    files: tuple  # ((path, base64), ...) seeded into /app
    tests: tuple  # ((path, base64), ...) the hidden tests
    solution: tuple  # ((path, base64), ...), possibly empty
    timeout_s: float


def _files(root: str, skip=()) -> tuple:
    out = []
    for top, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(top, name)
            rel = os.path.relpath(full, root)
            if rel in skip or os.path.islink(full):
                continue
            if os.path.getsize(full) > MAX_FILE_BYTES:
                raise ConfigError(f"{full}: larger than {MAX_FILE_BYTES >> 20} MiB")
            with open(full, "rb") as f:
                out.append((rel, base64.b64encode(f.read()).decode()))
    return tuple(out)


def load_task(path: str) -> HarborProblem:
    """One task directory, or a ConfigError naming it and why it cannot run here."""
    name = os.path.basename(os.path.normpath(path))
    where = f"Harbor task {name!r} ({path})"
    if not os.path.isfile(os.path.join(path, "instruction.md")):
        raise ConfigError(f"{where}: no instruction.md")
    if not os.path.isfile(os.path.join(path, "tests", "test.sh")):
        raise ConfigError(f"{where}: no tests/test.sh (its reward comes from it)")
    meta = {}
    if os.path.isfile(os.path.join(path, "task.toml")):
        try:
            with open(os.path.join(path, "task.toml"), "rb") as f:
                meta = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}/task.toml: {e}") from None
    env = meta.get("environment", {}) if isinstance(meta.get("environment"), dict) else {}
    if env.get("docker_image"):
        raise ConfigError(f"{where}: needs the container image {env['docker_image']!r}; no "
                          "images are built or pulled here")
    dockerfile = os.path.join(path, "environment", "Dockerfile")
    if os.path.isfile(dockerfile):
        with open(dockerfile) as f:
            for number, line in enumerate(f, 1):
                word = line.strip().split(" ", 1)[0].upper()
                if not any(word.startswith(ok) for ok in _DOCKER_OK if ok) and word:
                    raise ConfigError(f"{dockerfile}:{number}: {where} needs a container "
                                      f"image built ({word} ...); no images are built here")
    for compose in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml"):
        if os.path.isfile(os.path.join(path, "environment", compose)):
            raise ConfigError(f"{where}: needs containers ({compose}); none are run here")
    with open(os.path.join(path, "instruction.md"), encoding="utf-8") as f:
        instruction = f.read().strip()
    verifier = meta.get("verifier", {}) if isinstance(meta.get("verifier"), dict) else {}
    env_dir = os.path.join(path, "environment")
    files = _files(env_dir, skip=("Dockerfile",)) if os.path.isdir(env_dir) else ()
    sol_dir = os.path.join(path, "solution")
    solution = _files(sol_dir) if os.path.isdir(sol_dir) else ()
    return HarborProblem(name, instruction, files, _files(os.path.join(path, "tests")),
                         solution, float(verifier.get("timeout_sec", 60)))


def load_dir(path: str) -> list[HarborProblem]:
    if not os.path.isdir(path):
        raise ConfigError(f"config key 'task.path': {path} is not a directory")
    if os.path.isfile(os.path.join(path, "instruction.md")):
        return [load_task(path)]
    tasks = [load_task(os.path.join(path, d)) for d in sorted(os.listdir(path))
             if os.path.isdir(os.path.join(path, d))]
    if not tasks:
        raise ConfigError(f"config key 'task.path': {path} holds no Harbor task directory")
    return tasks


@dataclass(frozen=True)
class HarborTask(JudgedByItsWorld):
    train: tuple
    test: tuple

    def train_batch(self, seed: int, batch_index: int, count: int) -> list:
        rng = np.random.default_rng([seed, batch_index])
        return [self.train[i] for i in rng.integers(0, len(self.train), size=count)]

    def heldout_set(self, count: int) -> list:
        return list(self.test[:count])

    def prompt(self, problem: HarborProblem) -> str:
        return problem.instruction + "\n"

    def prompt_budget(self, count_tokens: Callable[[str], int]) -> int:
        return max(count_tokens(self.prompt(p)) for p in (*self.train, *self.test))

    @staticmethod
    def tool_context(problem: HarborProblem) -> dict:
        return {"setup": {"files": dict(problem.files)},
                "goal": {"tests": dict(problem.tests), "timeout_s": problem.timeout_s}}


def build(t: HarborTaskConfig, tokenizer) -> HarborTask:
    tasks = load_dir(t.path)
    names = {p.name for p in tasks}
    if t.heldout is not None:
        unknown = sorted(set(t.heldout) - names)
        _check(not unknown, "task.heldout", f"unknown tasks {unknown}")
        held = set(t.heldout)
    else:
        held = {n for n in names if in_heldout(n, 0, t.heldout_fraction)}
    train = tuple(p for p in tasks if p.name not in held)
    test = tuple(p for p in tasks if p.name in held)
    _check(bool(train) and (bool(test) or t.heldout_fraction == 0), "task.heldout",
           f"{len(tasks)} tasks split into {len(train)} for training and {len(test)} held "
           "out: list the held-out ones (task.heldout=[...]) or set task.heldout_fraction")
    return HarborTask(train, test or train)


def check_solutions(problems: Sequence[HarborProblem], limits=None) -> list:
    """Each task's own solution (solution/solve.sh, run in /app) judged by its tests, as an
    episode would be: one Verdict per task (a task without a solution: None)."""
    from rlvr_jax.envs import make_session_environment
    from rlvr_jax.sandbox.session import SessionLimits

    env = make_session_environment("harbor", "hermes", limits=limits or SessionLimits(
        call_s=120.0), spares=0)
    try:
        with_solution = [p for p in problems if p.solution]
        contexts = []
        for p in with_solution:
            context = HarborTask.tool_context(p)
            context["setup"]["files"].update({f".solution/{k}": v for k, v in p.solution})
            contexts.append(context)
        episodes = env.open(contexts)
        try:
            env.step(episodes, [env.render_call("bash", {
                "command": "bash .solution/solve.sh; rm -rf .solution"})] * len(episodes))
            verdicts = dict(zip((p.name for p in with_solution),
                                env.finish(episodes, [""] * len(episodes))))
        finally:
            env.close_episodes(episodes)
    finally:
        env.close()
    return [verdicts.get(p.name) for p in problems]


SPEC = register(TaskSpec("harbor", HarborTaskConfig, build, verifiers=("inprocess",),
                         demonstrations=False, environment="harbor"))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m rlvr_jax.tasks.harbor DIR", file=sys.stderr)
        return 2
    try:
        problems = load_dir(argv[0])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = 0
    for p, v in zip(problems, check_solutions(problems)):
        state = "no solution" if v is None else f"{v.status.name} ({v.detail})"
        failed += v is not None and v.status.name != "PASS"
        print(f"{p.name}: {state}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
