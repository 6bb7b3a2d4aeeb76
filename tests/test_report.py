"""`python -m rlvr_jax.report`: the table across a finished and a running run (its last line
half written), the PNG of their curves, and one error line for a directory without a run."""

import json
import os

from rlvr_jax import report


def _run(path, steps, total, finished, evals, name=None):
    path.mkdir(parents=True)
    rows = [{"step": 0, "eval/sampled_accuracy": evals[0], "eval/greedy_accuracy": 0.9}]
    rows += [{"step": s, "reward/accuracy": s / total, "reward/mean": 0.0}
             for s in range(1, steps + 1)]
    rows += [{"step": steps, "eval/sampled_accuracy": evals[1], "eval/greedy_accuracy": 0.95}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (path / "metrics.jsonl").write_text(text + ("" if finished else '{"step": 9, "rew'))
    (path / "run_config.json").write_text(json.dumps({"job": "rl", "num_steps": total}
                                                     | ({"name": name} if name else {})))
    (path / "wall_seconds.json").write_text(json.dumps({"wall_seconds": 12.0}))
    if finished:
        (path / "summary.json").write_text(json.dumps({"train/steps": total}))
    return str(path)


def test_a_table_and_curves_across_runs(tmp_path, capsys):
    done = _run(tmp_path / "done", 4, 4, True, (0.5, 0.75))
    going = _run(tmp_path / "going", 2, 8, False, (0.5, 0.625))
    out = tmp_path / "curves.png"
    assert report.main([done, going, "--out", str(out), "--smooth", "2"]) == 0
    text = capsys.readouterr().out
    assert "| done | rl | 4/4 | 0.500 -> 0.750 | 0.900 -> 0.950 | 0.875 | - | 12 | finished |" \
        in text
    assert "| going | rl | 2/8 | 0.500 -> 0.625 | 0.900 -> 0.950 | 0.188 | - | 12 | running" \
        in text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_are_named_by_preset_and_overrides(tmp_path, capsys):
    """Issue 38.4: every preset's plain run is `default`: named by the folder alone, runs of
    different presets could not be told apart."""
    runs = [_run(tmp_path / where / "runs" / preset / folder, 2, 2, True, (0.5, 0.9), preset)
            for where, preset, folder in (("a", "repl_agent", "default"),
                                          ("a", "calc_agent", "default"),
                                          ("a", "calc_agent", "seed=1"),
                                          ("b", "calc_agent", "seed=1"))]
    assert report.label(runs[2], {"name": "calc_agent"}) == "calc_agent seed=1"
    assert report.main(runs + ["--out", str(tmp_path / "c.png")]) == 0
    names = [line.split(" | ")[0][2:] for line in capsys.readouterr().out.splitlines()[2:6]]
    assert names[:2] == ["repl_agent", "calc_agent"]
    assert names[2:] == [os.path.relpath(runs[2]), os.path.relpath(runs[3])]  # the same name


def test_a_directory_without_a_run_is_one_error(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path}: not a run directory " \
                                              "(no metrics.jsonl)"
