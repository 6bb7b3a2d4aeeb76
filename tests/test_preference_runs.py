"""job=reward_model and job=dpo end to end: warm start, Bradley-Terry or DPO steps on
procedural pairs, held-out accuracy against labels and truth, one compile, exact resume."""

import json

import jax
import numpy as np
import pytest

from rlvr_jax import compose, run
from rlvr_jax.checkpoint import read_params
from tests.helpers import TINY

pytestmark = pytest.mark.slow

ARGS = ["+experiment=math_rm", "model.hidden_size=32", "model.num_layers=2",
        "model.intermediate_size=64", "warmup.steps=10", "warmup.sequences_per_step=8",
        "reward_model.steps=6", "preferences.pairs_per_step=8", "preferences.heldout_pairs=16",
        "logger=disabled", "logger.progress_bar=false", "checkpoint.every_steps=2"]


def test_a_reward_model_run_trains_reports_and_resumes_exactly(tmp_path, caplog):
    args = ARGS + [f"warmup.shared_dir={tmp_path / 'warm'}"]  # one warm start for both runs
    caplog.set_level("INFO", logger="rlvr_jax")
    once = run(compose(args, run_dir=tmp_path / "once"))
    # Issue 26: a preference job printed no run directory, which math_rlhf needs.
    assert f"run dir {tmp_path / 'once'} | job reward_model" in caplog.text
    assert once["compiles"]["reward_model_step"] == 1
    assert 0.0 <= once["rm/heldout_gold_accuracy"] <= 1.0 and once["rm/label_noise"] == 0.2
    rows = [json.loads(line) for line in open(tmp_path / "once" / "metrics.jsonl")]
    steps = [r for r in rows if "rm/loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    assert steps[0]["rm/loss"] == pytest.approx(np.log(2), abs=1e-5)  # a zero head
    assert 0.5 <= np.mean([r["rm/labels_agreeing_with_gold"] for r in steps]) <= 1.0
    twice = tmp_path / "twice"
    stopped = run(compose(args + ["stop_after_steps=3"], run_dir=twice))
    assert stopped == {"stopped_at_step": 3}
    resumed = run(compose(args, run_dir=twice))
    assert resumed["rm/heldout_gold_accuracy"] == once["rm/heldout_gold_accuracy"]
    a, _ = read_params(tmp_path / "once")
    b, _ = read_params(twice)
    assert set(a) == {"trunk", "head"}
    jax.tree.map(np.testing.assert_array_equal, a, b)
    # The finished run says so and does nothing.
    assert run(compose(args, run_dir=twice))["train/steps"] == 6


DPO = ["+experiment=math_dpo", *TINY, "warmup.steps=0", "dpo.steps=6",
       "preferences.pairs_per_step=8", "preferences.heldout_pairs=16", "eval.every_steps=3",
       "checkpoint.every_steps=2"]


def test_a_dpo_run_evaluates_the_task_and_resumes_exactly(tmp_path):
    once = run(compose(DPO, run_dir=tmp_path / "once"))
    assert once["compiles"]["dpo_step"] == 1 and once["compiles"]["dpo_reference_logp"] == 1
    assert once["train/steps"] == 6 and 0.0 <= once["dpo/heldout_gold_accuracy"] <= 1.0
    rows = [json.loads(line) for line in open(tmp_path / "once" / "metrics.jsonl")]
    steps = [r for r in rows if "dpo/loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    assert steps[0]["dpo/loss"] == pytest.approx(np.log(2), abs=1e-5)  # policy == reference
    assert [r["step"] for r in rows if "eval/sampled_accuracy" in r] == [0, 3, 6]
    twice = tmp_path / "twice"
    assert run(compose(DPO + ["stop_after_steps=4"], run_dir=twice)) == {"stopped_at_step": 4}
    resumed = run(compose(DPO, run_dir=twice))
    for k in ("eval/sampled_accuracy_end", "eval/greedy_accuracy_start",
              "dpo/heldout_label_accuracy"):
        assert resumed[k] == once[k], k
    a, _ = read_params(tmp_path / "once")
    b, _ = read_params(twice)
    assert set(a) == {"policy"}  # as an RL run's: export and evaluate read it alike
    jax.tree.map(np.testing.assert_array_equal, a, b)


def _pairs_file(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_reward_model_trains_on_preference_files(tmp_path):
    rows = [{"prompt": f"{a:02d}+{b:02d}=", "chosen": f"{a + b}", "rejected": f"{a + b + 1}"}
            for a, b in [(1, 2), (10, 20), (33, 44), (5, 61), (7, 8), (40, 9)]]
    files = [f"preferences.train_path={_pairs_file(tmp_path / 'train.jsonl', rows)}",
             f"preferences.test_path={_pairs_file(tmp_path / 'test.jsonl', rows[:3])}"]
    out = run(compose(ARGS + files + ["warmup.steps=0"], run_dir=tmp_path / "r"))  # no warm start
    assert 0.0 <= out["rm/heldout_label_accuracy"] <= 1.0
    assert "rm/heldout_gold_accuracy" not in out  # files carry no gold label
    rows_logged = [json.loads(line) for line in open(tmp_path / "r" / "metrics.jsonl")]
    assert [r["step"] for r in rows_logged if "rm/loss" in r] == [1, 2, 3, 4, 5, 6]


def test_a_bad_preference_row_is_one_error_naming_its_line_before_any_training(tmp_path):
    from rlvr_jax.data.loaders import DatasetError

    train = _pairs_file(tmp_path / "train.jsonl", [
        {"prompt": "1+2=", "chosen": "3", "rejected": "4"},
        {"prompt": "1+2=", "chosen": "3"}])
    test = _pairs_file(tmp_path / "test.jsonl", [{"prompt": "1+2=", "chosen": "3",
                                                  "rejected": "4"}])
    with pytest.raises(DatasetError, match=r"train.jsonl:2"):
        run(compose(ARGS + [f"preferences.train_path={train}",
                            f"preferences.test_path={test}"], run_dir=tmp_path / "r"))
    assert not (tmp_path / "r" / "warmstart").exists()  # failed before the warm start
