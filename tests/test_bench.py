"""The benchmark scripts run (experiments/bench/): gpu.py at toy sizes on CPU writes its JSON
with every field a GPU session reads; efficiency.py prints its tables; update.py,
decode_phases.py, turn_decode.py, resume.py and streaming.py (its repl arm: real sessions) run
at toy sizes; fleet.py runs in tests/sandbox/test_fleet.py, on its cluster. Numbers are not
asserted: they are measurements, not tests."""

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT, UNAVAILABLE, xla_env

pytestmark = pytest.mark.slow


def _run(*args):
    env = xla_env(1)
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_gpu_script_at_toy_sizes(tmp_path):
    out = tmp_path / "gpu.json"
    _run("experiments/bench/gpu.py", "--toy", "--out", str(out))
    r = json.loads(out.read_text())
    assert r["sampler"]["tokens_per_s"] > 0 and r["update"]["seconds"] > 0
    assert r["sampler_4_phases"]["same_tokens"]
    once = r["update_prompt_once"]
    assert once["tflops"] < r["update"]["tflops"] and once["seconds"] > 0
    assert abs(once["loss"] - r["update"]["loss"]) <= 1e-3 * max(1.0, abs(r["update"]["loss"]))
    assert r["memory"]["predicted_gb"] > 0 and "measured_peak_gb" in r["memory"]
    assert r["decode_step"]["bytes_accessed_gb"] > 0 and r["decode_step"]["minimum_gb"] > 0
    packed = r["update_packed_2x32"]  # fewer positions per real token, the same loss
    assert packed["positions_per_token"] < once["positions_per_token"] < r["update"][
        "positions_per_token"]
    assert abs(packed["loss"] - once["loss"]) <= 1e-3 * max(1.0, abs(once["loss"]))


def test_efficiency_tables():
    text = _run("experiments/bench/efficiency.py", "--cases", "math_grpo")
    assert "| math_grpo | 64 x 8 |" in text and "(8.00x)" in text
    assert "| 1319 | 128 |" in text
    # the update's repeated prompts: positions from shapes, FLOPs counted on the jaxpr
    assert "| math_grpo | 5,632 -> 3,392 (39.8% fewer) |" in text
    # the packed update (packing.py's own plan) against the padded one
    assert "| update at math_grpo shapes" in text and "| packed, rows of 44 slots" in text


def test_update_bench_at_toy_sizes():
    pytest.importorskip("torch")
    text = _run("experiments/bench/update.py", "--model", "toy", "--repeats", "1", "--batch",
                "8")
    assert "| torch, TRL's GRPO loss |" in text and "remat dots (model=small now)" in text
    assert "each group's prompt once" in text


def test_decode_benches_at_toy_sizes():
    text = _run("experiments/bench/decode_phases.py", "--model", "toy", "--repeats", "1",
                "--batch", "4", "--prompt", "4", "--new-tokens", "8", "--phases", "1,4")
    assert "| 4 |" in text and text.count("True") == 2
    text = _run("experiments/bench/turn_decode.py", "--model", "toy", "--repeats", "1",
                "--rows", "4", "--prompt", "4", "--new-tokens", "8")
    assert "| multi-turn sampler (a column per row) |" in text


@pytest.mark.parametrize("env", ["worlds", "repl"])
def test_streaming_bench_at_toy_sizes(env):
    """Both environments of the bench; repl: real sandboxed sessions (bubblewrap), its
    released and carried (late calls deferred) arms only (the other drivers are the worlds
    run's)."""
    if env == "repl" and UNAVAILABLE:
        pytest.skip(f"no sandbox: {UNAVAILABLE}")
    text = _run("experiments/bench/streaming.py", "--episodes", "8", "--steps", "2",
                "--rows", "4", "--insert", "2", "--new-tokens", "24", "--hidden", "32",
                "--layers", "1", "--env", env,
                *(["--arms", "released,carried_deferred", "--carry", "2"] if env == "repl" else
                  ["--call-limit", "0.01"]),  # some calls end as the environment's timeouts
                "--median", "0.002", "--p99", "0.02", "--repeats", "1", "--cover", "0.01")
    rows = [line for line in text.splitlines() if line.startswith(("| streamed", "| carried"))]
    assert len(rows) == (4 if env == "repl" else 12), text
    assert all(line.endswith("| True |") for line in rows), text


def test_resume_bench_at_toy_sizes():
    """resume.py: the whole-budget resume against chunks of 16 columns; the episodes equal."""
    text = _run("experiments/bench/resume.py", "--episodes", "16", "--rows", "4",
                "--new-tokens", "48", "--hidden", "32", "--layers", "1", "--columns", "0,16",
                "--repeats", "1", "--call-boost", "4")
    rows = [line for line in text.splitlines() if line.startswith(("| 48 ", "| 16 "))]
    assert len(rows) == 2 and all(line.endswith("| True |") for line in rows), text
    assert int(rows[0].split("|")[3]) > 0, text  # some resumes ran


def test_the_stall_bound_against_hand_computed_runs():
    """stall_bound.py's model, with fixed latencies (median = p99): calls of 3 s needed one run
    on, runs decoding 1 s and updates of 0.5 s: run 0 ends at 1, run 1 starts at 1.5 and waits
    for run 0's calls until 3, run 2 runs 3.5 .. 4.5 (run 1's calls are back at 4.5), and so
    on: steps of 1.5 and 1.0 s in turn (1.25x, 20% of the time waiting); a call limit under
    the slack never waits; slower calls or less slack never shorten a step."""
    from experiments.bench.stall_bound import bound

    kw = dict(calls=4, decode_s=1.0, update_s=0.5, runs=400, seed=0)
    mean, _, idle = bound(1, median_s=3.0, p99_s=3.0, limit_s=float("inf"), **kw)
    assert mean == pytest.approx(1.25, abs=1e-2)
    assert idle == pytest.approx(0.2, abs=1e-2)
    assert bound(1, median_s=0.2, p99_s=5.0, limit_s=1.5, **kw) == (1.0, 1.0, 0.0)
    tail = [bound(s, median_s=0.2, p99_s=p99, limit_s=float("inf"), **kw)[0]
            for s in (1, 2) for p99 in (5.0, 20.0)]
    assert tail[1] > tail[0] > 1.0 and tail[3] > tail[2] and tail[0] > tail[2]
