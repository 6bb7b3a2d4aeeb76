"""The entry point (`python -m rlvr_jax.train`): a Hydra multirun through it (its run life:
tests/test_run_control.py)."""

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, TINY

pytestmark = pytest.mark.slow  # see pyproject.toml: not in the daily `-m "not slow"` run


def test_multirun_sweeps_the_learning_rate(tmp_path):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr_jax.train", "-m", "+experiment=math_grpo", "num_steps=1",
         "algo.optim.learning_rate=1e-4,3e-4", *TINY, "warmup.steps=2", f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summaries = sorted(tmp_path.glob("*/summary.json"))
    assert len(summaries) == 2
    # Hydra writes the swept values as floats in the directory names.
    assert {p.parent.name.split(",")[0] for p in summaries} == {"algo.optim.learning_rate=0.0001",
                                                                "algo.optim.learning_rate=0.0003"}
