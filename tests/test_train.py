"""The entry point (`python -m rlvr_jax.train`): a Hydra multirun through it (its run life:
tests/test_run_control.py)."""

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, TINY, xla_env

pytestmark = pytest.mark.slow  # see pyproject.toml: not in the daily `-m "not slow"` run


def test_multirun_sweeps_the_learning_rate(tmp_path):
    env = xla_env(8)
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr_jax.train", "-m", "+experiment=math_grpo", "num_steps=1",
         "algo.optim.learning_rate=1e-4,3e-4", *TINY, "warmup.steps=2", "eval.num_problems=0",
         f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summaries = sorted(tmp_path.glob("*/summary.json"))
    assert len(summaries) == 2
    assert len(list((tmp_path / "sweeps").glob("*.yaml"))) == 1  # this sweep's record
    # Hydra writes the swept values as floats in the directory names.
    assert {p.parent.name.split(",")[0] for p in summaries} == {"algo.optim.learning_rate=0.0001",
                                                                "algo.optim.learning_rate=0.0003"}


def test_two_sweeps_of_one_preset_each_keep_their_record(tmp_path):
    """Hydra rewrites multirun/<name>/multirun.yaml at every sweep; the sweep callback keeps
    each sweep's config under sweeps/, one file per sweep command."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from rlvr_jax import config as config_lib
    from rlvr_jax.config.sweeps import SweepRecord, sweep_record_path

    config_lib.register_configs()
    sweeps = [["+experiment=math_grpo", "algo.optim.learning_rate=1e-4,3e-4"],
              ["+experiment=math_grpo", "seed=0,1"]]
    with initialize_config_dir(config_dir=config_lib.conf_dir(), version_base="1.3"):
        for overrides in sweeps:
            cfg = compose("config", overrides=overrides[:1], return_hydra_config=True)
            with open_dict(cfg):
                cfg.hydra.sweep.dir = str(tmp_path)
                cfg.hydra.overrides.task = overrides
            SweepRecord().on_multirun_start(cfg)
    for overrides in sweeps:
        text = open(sweep_record_path(str(tmp_path), overrides)).read()
        assert overrides[1] in text
    assert len(list((tmp_path / "sweeps").iterdir())) == 2
