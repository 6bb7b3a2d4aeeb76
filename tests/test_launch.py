"""launch/: every launcher has --help (exit 0, nothing made or submitted) and a dry run that
prints what it would submit; a bad experiment is one line naming the known ones."""

import os
import subprocess

import pytest

from tests.helpers import ROOT

LAUNCHERS = {"slurm.sh": [], "tpu_pod.sh": ["my-tpu", "us-west4-a"]}


def _launch(name, *args, tmp_path):
    env = dict(os.environ, PATH=f"{tmp_path}:/usr/bin:/bin")  # no sbatch, no gcloud here
    return subprocess.run(["bash", os.path.join(ROOT, "launch", name), *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_help_dry_run_and_a_bad_experiment(name, tmp_path):
    before = set(os.listdir(os.path.join(ROOT, "runs"))) if os.path.isdir(
        os.path.join(ROOT, "runs")) else set()
    shown = _launch(name, "--help", tmp_path=tmp_path)
    assert shown.returncode == 0 and "--dry-run" in shown.stdout and "usage" not in shown.stderr
    dry = _launch(name, "--dry-run", *LAUNCHERS[name], "gsm8k_grpo",
                  "algo.optim.learning_rate=1e-6", tmp_path=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "+experiment=gsm8k_grpo" in dry.stdout and "learning_rate=1e-6" in dry.stdout
    assert ("#SBATCH --nodes=1" if name == "slurm.sh" else "gcloud compute tpus") in dry.stdout
    bad = _launch(name, *LAUNCHERS[name], "no_such_preset", tmp_path=tmp_path)
    assert bad.returncode == 2 and "no experiment 'no_such_preset'" in bad.stderr
    assert "gsm8k_grpo" in bad.stderr and "Traceback" not in bad.stderr
    after = set(os.listdir(os.path.join(ROOT, "runs"))) if os.path.isdir(
        os.path.join(ROOT, "runs")) else set()
    assert after == before and not os.listdir(tmp_path)  # nothing made
