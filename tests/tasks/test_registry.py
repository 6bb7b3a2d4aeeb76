"""The task registry: a task is one module (schema, builder, verifier kinds declared together)
plus one conf file; config composition, validation and `tasks.build` find it there."""

from dataclasses import dataclass

import pytest

from rlvr_jax import tasks
from rlvr_jax.config import ConfigError, to_run_config
from rlvr_jax.config.choices import _check
from rlvr_jax.tasks import registry
from rlvr_jax.tasks.arithmetic import ArithmeticTask


@dataclass
class EchoTaskConfig:
    """A user's task: repeat the number."""

    name: str = "echo_test"
    digits: int = 2

    def check(self, key: str = "task") -> None:
        _check(self.digits >= 1, f"{key}.digits", "must be >= 1")


def test_a_users_task_is_one_registration():
    registry.register(registry.TaskSpec(
        "echo_test", EchoTaskConfig,
        lambda t, tok: ArithmeticTask(("+",), t.digits, 2, 2, 0.1, 0, "{question}=", True),
        verifiers=("inprocess",)))
    base = {"task": {"name": "echo_test", "digits": 3}, "verifier": {"kind": "inprocess"}}
    cfg = to_run_config(base)
    assert isinstance(cfg.task, EchoTaskConfig) and cfg.task.digits == 3
    assert tasks.build(cfg.task, None).operand_digits == 3
    with pytest.raises(ConfigError, match="'task.digits'"):
        to_run_config({**base, "task": {"name": "echo_test", "digits": 0}})
    with pytest.raises(ConfigError, match="'verifier.kind'.*inprocess"):
        to_run_config({**base, "verifier": {"kind": "math"}})
    with pytest.raises(ConfigError, match="unknown config key"):
        to_run_config({**base, "task": {"name": "echo_test", "digitz": 3}})


def test_an_unknown_task_names_the_key_and_the_known_ones():
    with pytest.raises(ConfigError, match="'task.name'.*arithmetic.*codegen"):
        to_run_config({"task": {"name": "nope"}})


def test_every_builtin_task_has_a_conf_file():
    import glob
    import os

    import yaml

    from rlvr_jax.config import conf_dir

    named = {yaml.safe_load(open(f)).get("name")
             for f in glob.glob(os.path.join(conf_dir(), "task", "*.yaml"))}
    for name, spec in registry.specs().items():
        if spec.schema.__module__.startswith("rlvr_jax."):
            assert name in named, f"task {name} has no conf/task/*.yaml"
            assert spec.verifiers, name


@pytest.mark.slow  # a run of the example (9 s); the not-slow run keeps the registry's checks
def test_the_documented_example_task_works_as_written(tmp_path):
    """conf/README.md's "Adding a task" module, executed as written: it registers, composes
    from a plain dict, builds, and its jobs are scored by the routed verifier."""
    import re
    import types

    import numpy as np

    from rlvr_jax.config import conf_dir
    from rlvr_jax.verify.verifiers import make_verifier

    text = open(f"{conf_dir()}/README.md").read()
    code = re.search(r"```python\n# rlvr_jax/tasks/reverse.py\n(.*?)```", text, re.S).group(1)
    module = types.ModuleType("reverse_example")
    exec(compile(code, "conf/README.md", "exec"), module.__dict__)
    cfg = to_run_config({"task": {"name": "reverse", "length": 4},
                         "verifier": {"kind": "routed"}})
    task = tasks.build(cfg.task, None)
    words = task.train_batch(0, 0, 3)
    rng = np.random.default_rng(0)
    answers = [task.demonstration(w, i == 1, rng, 1) for i, w in enumerate(words)]
    verifier = make_verifier("routed", workers=1, timeout_s=5.0, batch_timeout_s=10.0,
                             mode=None)
    try:
        got = [v.status.name for v in verifier.verify(task.verify_jobs(words, answers))]
    finally:
        verifier.close()
    assert got == ["PASS", "WRONG", "PASS"] or words[1] == words[1][::-1]
    # Issue 38.1: selected by its name with no conf file of its own (as a task of another
    # package, registered by an entry point, is), it trains a step with the README's command.
    from rlvr_jax import jobs
    from rlvr_jax.config import register_configs
    from tests.helpers import TINY, run_config

    command = re.search(r"python -m rlvr_jax.train (task=reverse .*)\n", text).group(1)
    register_configs()  # as the CLI does once the entry point's module is imported
    summary = jobs.run(run_config([*command.split(), *TINY, "num_steps=1"], tmp_path / "run"))
    assert summary["train/steps"] == 1 and 0.0 <= summary["eval/sampled_accuracy_end"] <= 1.0
