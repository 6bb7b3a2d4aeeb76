"""The run scaffold (run_scaffold.py) piece by piece, with stand-ins for the checkpointer and
the tracker (whole runs through it: tests/test_run_control.py, tests/test_loop.py,
tests/test_preference_runs.py): resume or a fresh start, the stop tail, the finished-run
message, and a job's step count from the config."""

import json

import numpy as np
import pytest

from rlvr_jax import run_scaffold
from rlvr_jax.config import ConfigError
from tests.helpers import TINY, run_config


class _Ckpt:
    directory = "/ckpt"

    def __init__(self, latest=None):
        self.latest, self.closed = latest, False

    def latest_step(self):
        return self.latest

    def restore(self, step, abstract):
        assert abstract["w"].shape == (2,)  # restored onto the fresh state's shapes
        return {"w": np.ones(2)}, run_scaffold.fresh_loop(0)._replace(step=step)

    def close(self):
        self.closed = True


class _Tracker:
    def __init__(self):
        self.lines, self.cut, self.closed = [], None, False

    def write(self, line):
        self.lines.append(line)

    def truncate_after(self, step):
        self.cut = step

    def close(self):
        self.closed = True


def test_a_fresh_start_and_a_resume(tmp_path):
    import jax.numpy as jnp

    tracker, state = _Tracker(), {"w": jnp.zeros(2)}
    fresh = run_scaffold.fresh_loop(7, kl_coef=0.05)
    got = run_scaffold.resume(_Ckpt(), tracker, state, fresh, str(tmp_path), 10)
    assert got.state is state and got.loop is fresh and got.wall_before == 0.0
    assert tracker.cut == 0 and tracker.lines == []
    np.testing.assert_array_equal(fresh.rng_key, run_scaffold.fresh_loop(7).rng_key)
    run_scaffold.write_wall(str(tmp_path), 12.5)
    tracker = _Tracker()
    got = run_scaffold.resume(_Ckpt(latest=4), tracker, state, fresh, str(tmp_path), 10)
    assert got.state["w"][0] == 1 and got.loop.step == 4 and got.wall_before == 12.5
    assert tracker.cut == 4  # metrics.jsonl loses the rows the resumed run logs again
    assert tracker.lines == ["RESUMING from checkpoint step 4 in /ckpt (6 of 10 steps left)"]


def test_the_stop_tail_and_the_last_step():
    ckpt, tracker, walls = _Ckpt(), _Tracker(), []
    out = run_scaffold.stopped(ckpt, tracker, walls.append, 3.0, 2, "SIGTERM")
    assert out == {"stopped_at_step": 2, "reason": "SIGTERM"}
    assert ckpt.closed and tracker.closed and walls == [3.0]
    assert tracker.lines == ["stopped after step 2 (SIGTERM); checkpoint in /ckpt; rerun the "
                             "same command to resume"]
    assert run_scaffold.stopped(_Ckpt(), _Tracker(), walls.append, 1.0, 5, None) == \
        {"stopped_at_step": 5}
    assert run_scaffold.last_step(3, 10, 0) == 10 and run_scaffold.last_step(3, 10, 4) == 7
    assert run_scaffold.last_step(8, 10, 4) == 10


def test_a_finished_run_is_recognised_by_its_step_count(tmp_path):
    cfg = run_config(["+experiment=math_grpo", *TINY, "num_steps=3"], tmp_path)
    assert run_scaffold.finished_summary(str(tmp_path), 3) is None
    summary = {"train/steps": 3, "eval/greedy_accuracy_start": 0.5,
               "eval/greedy_accuracy_end": 0.75, "eval/sampled_accuracy_start": 0.25,
               "eval/sampled_accuracy_end": 0.5, "train/wall_seconds": 9.0, "compiles": {}}
    run_scaffold.write_summary(str(tmp_path), summary)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert run_scaffold.finished_summary(str(tmp_path), 4) is None  # "train longer" is not done
    assert run_scaffold.finished_summary(str(tmp_path), 3) == summary
    message = run_scaffold.finished_message(cfg, summary)
    assert "is complete (3 steps)" in message and "nothing to do" in message
    assert "     0.500  0.750" in message  # the greedy row: before RL, end
    # Issue 26: the wall time covers the warm start and evaluations too, and says so.
    assert "wall time 9s (warm start, evaluations and 3 RL steps, every invocation)" in message
    blind = {k: v for k, v in summary.items() if not k.startswith("eval/")}
    message = run_scaffold.finished_message(cfg, blind)  # eval.num_problems=0: none ran
    assert "is complete (3 steps)" in message and "no held-out evaluation" in message
    rm = {"train/steps": 5, "rm/heldout_label_accuracy": 0.9}
    assert "is complete: " in run_scaffold.finished_message(cfg, rm)


def test_each_job_has_its_step_count():
    assert run_config(["+experiment=math_grpo", "num_steps=7"]).total_steps == 7
    assert run_config(["+experiment=math_rm", "reward_model.steps=9"]).total_steps == 9
    assert run_config(["+experiment=math_dpo", "dpo.steps=11"]).total_steps == 11


def _recorded(tmp_path, overrides):
    from rlvr_jax.config import as_dict

    cfg = run_config(["+experiment=math_grpo", *TINY, *overrides], tmp_path)
    (tmp_path / "run_config.json").write_text(json.dumps(as_dict(cfg), default=str))
    return cfg


def test_a_resume_with_changed_results_is_refused_in_one_line(tmp_path, capsys, caplog):
    """Issue 26: a run stopped and rerun in its directory with another learning rate and
    group size resumed silently, and run_config.json no longer described its early steps."""
    import pytest

    from rlvr_jax.config import ConfigError

    caplog.set_level("INFO")
    _recorded(tmp_path, [])
    changed = run_config(["+experiment=math_grpo", *TINY, "algo.optim.learning_rate=0.01",
                          "algo.samples_per_prompt=8"], tmp_path)
    with pytest.raises(ConfigError) as e:
        run_scaffold.outputs(changed)
    message = str(e.value)
    assert "\n" not in message and "algo.optim.learning_rate" in message
    assert "algo.samples_per_prompt: 4 -> 8" in message and "allow_config_changes" in message
    recorded = json.loads((tmp_path / "run_config.json").read_text())
    assert recorded["algo"]["samples_per_prompt"] == 4  # untouched: it still says what ran
    # Keys that change no result (reporting, capacity, checkpoint cadence) resume freely.
    same = run_config(["+experiment=math_grpo", *TINY, "logger.progress_bar=true",
                       "verifier.workers=3", "checkpoint.every_steps=7", "stop_after_steps=1"],
                      tmp_path)
    ckpt, tracker = run_scaffold.outputs(same)
    tracker.close()
    ckpt.close()
    # The host's sandbox containment is recorded with the run (issue 38.6), never compared.
    host = json.loads((tmp_path / "run_config.json").read_text())["host"]
    from tests.helpers import UNAVAILABLE

    assert host["sandbox"].startswith("unavailable" if UNAVAILABLE else "bubblewrap (no network")
    assert host["peak_flops"] > 0 and "measured" in host["peak_flops_is"]  # what MFU is of
    said = capsys.readouterr().out + caplog.text  # and said at start
    assert "sandbox: " + host["sandbox"] in said
    ckpt, tracker = run_scaffold.outputs(same)
    tracker.close()
    ckpt.close()


def test_an_allowed_change_is_recorded_with_its_step(tmp_path):
    _recorded(tmp_path, [])
    allowed = run_config(["+experiment=math_grpo", *TINY, "algo.optim.learning_rate=0.01",
                          "allow_config_changes=true"], tmp_path)
    run_scaffold.check_same_config(allowed, 12)
    (row,) = [json.loads(line) for line in open(tmp_path / "config_changes.jsonl")]
    assert row["from_step"] == 12
    assert row["changes"]["algo.optim.learning_rate"]["after"] == 0.01


def test_a_finished_run_rerun_with_another_value_names_it(tmp_path):
    cfg = _recorded(tmp_path, [])
    other = run_config(["+experiment=math_grpo", *TINY, "algo.optim.learning_rate=0.01"],
                       tmp_path)
    from rlvr_jax.config import as_dict, changes

    recorded = json.loads((tmp_path / "run_config.json").read_text())
    diff = changes.differences(recorded, as_dict(other), resolved=False)
    assert [k for k, _, _ in diff] == ["algo.optim.learning_rate"]
    summary = {"train/steps": cfg.num_steps, "rm/heldout_label_accuracy": 0.9}
    assert "differs from the finished run in algo.optim.learning_rate" in \
        run_scaffold.finished_message(other, summary, diff)
    # Rerun: refused in one line naming the key (issue 38.3), not "nothing to do".
    run_scaffold.write_summary(str(tmp_path), {"train/steps": other.total_steps})
    with pytest.raises(ConfigError, match=r"config key 'algo.optim.learning_rate': .* "
                                          r"finished run with other values \(algo.optim.lea"):
        run_scaffold.run(other, {})
    assert run_scaffold.run(cfg, {}) == {"train/steps": cfg.total_steps}  # same: its results


def test_files_other_processes_read_are_never_seen_half_written(tmp_path):
    """run_config.json, summary.json, wall_seconds.json, processes.txt: a reader racing the
    writer (process 1 checking the recorded config while process 0 rewrites it) reads the old
    file or the new one, whole."""
    import threading

    from rlvr_jax import distributed

    path = str(tmp_path / "run_config.json")
    texts = [json.dumps({"k": "x" * 200_000}), json.dumps({"k": "y" * 300_000})]
    distributed.publish(path, texts[0])
    seen, done = [], threading.Event()

    def read():
        while not done.is_set():
            with open(path) as f:
                seen.append(f.read() in texts)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(200):
        distributed.publish(path, texts[i % 2])
    done.set()
    reader.join()
    assert seen and all(seen)
    assert [p.name for p in tmp_path.iterdir()] == ["run_config.json"]  # no temporary left
