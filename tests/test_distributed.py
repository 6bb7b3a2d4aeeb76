"""One run over two processes (2 CPU devices each, gloo collectives, coordinator on
127.0.0.1) against one process with 4 devices: the same multi-turn episodes, rewards and
updates (PPO, a stateful environment, async rollouts, a distillation teacher); a resume
across the two processes; a killed process ends the other within the heartbeat bound."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from rlvr_jax.checkpoint import read_policy_params
from tests.helpers import xla_env

pytestmark = pytest.mark.slow

MODEL = ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=4",
         "model.num_kv_heads=2", "model.intermediate_size=64"]
SMALL = [*MODEL, "num_steps=3", "warmup.steps=10", "warmup.sequences_per_step=8",
         "warmup.lr_warmup_steps=0", "warmup.learning_rate=0.01",
         "algo.prompts_per_step=4", "algo.samples_per_prompt=4",
         "verifier.reward_scheme=format_penalty", "eval.num_problems=4",
         "eval.sampled_per_problem=1", "eval.sequences_per_batch=4", "logger=disabled",
         "logger.progress_bar=false", "checkpoint.every_steps=10"]
COMMON = ["+experiment=math_grpo", *SMALL]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(run_dir, overrides, processes: int, heartbeat_s: int = 30):
    """The entry point as `processes` processes sharing 4 CPU devices."""
    env = xla_env(4 // processes, HF_HUB_OFFLINE="1")
    # No persistent compilation cache here: with the suite's shared cache, the processes of
    # one run were seen to load different entries and hang in a collective (a barrier timed
    # out: "workers are out of sync"), depending on what earlier tests had cached.
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    cmd = [sys.executable, "-m", "rlvr_jax.train", *overrides, f"hydra.run.dir={run_dir}"]
    if processes == 1:
        return [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)]
    port = _free_port()
    return [subprocess.Popen(cmd + [f"distributed.num_processes={processes}",
                                    f"distributed.process_id={i}",
                                    f"distributed.coordinator_address=127.0.0.1:{port}",
                                    f"distributed.heartbeat_timeout_s={heartbeat_s}"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(processes)]


def _finish(procs, timeout=600) -> list[str]:
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, out[-3000:]
        outs.append(out)
    return outs


def _steps(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return [r for r in rows if "reward/mean" in r]


def _assert_same_run(one_dir, two_dir):
    """Rollouts and rewards bitwise (the same SPMD programs, the same keys); params to
    float32 reduction-order tolerance: a cross-process all-reduce over gloo sums in another
    order than XLA:CPU's in-process one, and Adam's m / sqrt(v) turns a last-bit difference
    of a near-zero gradient into up to ~lr of difference in that one weight (seen: 1 weight of
    131072 off by 1.8e-5)."""
    one, two = _steps(one_dir), _steps(two_dir)
    assert [r["step"] for r in two] == [1, 2, 3]
    for key in ("reward/mean", "reward/accuracy", "response/length_mean"):
        assert [r[key] for r in two] == [r[key] for r in one], key
    for key in ("train/loss", "train/grad_norm", "train/distill_reverse_kl"):
        np.testing.assert_allclose([r[key] for r in two], [r[key] for r in one], rtol=1e-4,
                                   atol=1e-6, err_msg=key)
    # Each process verified its own half of every step's 16 samples.
    assert all(r["verify/samples_process_0"] == r["verify/samples_process_1"] == 8 for r in two)
    p1, _ = read_policy_params(one_dir)
    p2, _ = read_policy_params(two_dir)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4), p1, p2)
    return p2


def test_two_processes_equal_one_and_resume(tmp_path):
    """One 2-process run covering what several did (each 2-process run costs minutes on a
    2-core machine): PPO (the update with the most cross-device pieces: critic, GAE, KL) on
    multi-turn episodes in a stateful environment (python_repl: a sandbox session per
    episode) streamed through decode rows and carried across updates (each process opens,
    steps, finishes and closes its own block's episodes, whichever row they decode in, what
    they learn shared at each boundary; the carried stream checkpointed and restored by both
    processes; the lock-step driver's 2 == 1 is tests/test_streaming.py's), asynchronous
    rollouts (one step off-policy, the producer's snapshots checkpointed and restored), the update that computes each
    group's prompt once, and on-policy distillation (a teacher of another size read by both
    processes, its reverse KL a dense reward): 2 processes x 2 devices, stopped after 2
    steps and rerun, == 1 process x 4 devices uninterrupted (rollouts, episodes and rewards
    bitwise, params to reduction order); the bitwise resume of one layout is
    tests/test_loop.py's, the GRPO family's host advantages are the same numpy on every
    process (tests/test_stages.py)."""
    from tests.helpers import UNAVAILABLE, make_char_teacher

    if UNAVAILABLE:
        pytest.skip(f"no sandbox: {UNAVAILABLE}")
    one, two = tmp_path / "one", tmp_path / "two"
    teacher = make_char_teacher(tmp_path / "teacher")
    args = ["+experiment=repl_agent", "algo=ppo", *SMALL, "env.workers=1",
            "sampling.max_new_tokens=80", "warmup.steps=40", "env.session.spares=8",
            f"warmup.shared_dir={tmp_path / 'warm'}", "rollout.off_policy_steps=1",
            "algo.loss.correction=token", f"distill.teacher={teacher}", "distill.coef=0.1",
            "algo.share_prompts=true",  # one warm start for both; each prompt once
            "rollout.stream.rows=8", "rollout.stream.carry_batches=1",
            "rollout.stream.release_rows=true",  # streamed, episodes carried across updates
            "eval.num_problems=0"]  # no held-out evaluation: the params are compared
    _finish(_start(one, args, 1))
    outs = _finish(_start(two, args + ["stop_after_steps=2"], 2))
    assert "processes 2" in outs[0] and "stopped after step 2" in outs[0]
    assert "stopped after step 2" not in outs[1]  # one writer: process 0
    outs = _finish(_start(two, args, 2))
    assert "RESUMING from checkpoint step 2" in outs[0]
    assert "no held-out evaluation" in outs[0] and "no held-out evaluation" not in outs[1]
    _assert_same_run(one, two)
    assert open(two / "processes.txt").read().strip() == "2"
    a, b = _steps(one), _steps(two)
    for key in ("episode/turns_mean", "episode/tool_calls_mean", "episode/observation_share"):
        assert [r[key] for r in b] == [r[key] for r in a], key
    assert any(r["episode/tool_calls_mean"] > 0 for r in a), "no tool was called"
    assert all(r["session/leaked"] == 0 and r["session/failure_rate"] == 0 for r in a + b)
    assert max(r["rollout/version_lag_max"] for r in b) == 2
    assert [r["stream/carried_episodes"] for r in b] == [r["stream/carried_episodes"] for r in a]


def test_a_resume_with_another_process_count_is_refused(tmp_path):
    from rlvr_jax import distributed
    from rlvr_jax.checkpoint import CheckpointError

    (tmp_path / "processes.txt").write_text("2\n")
    with pytest.raises(CheckpointError, match="started with 2 processes and this run has 1"):
        distributed.check_process_count(str(tmp_path))
    (tmp_path / "fresh").mkdir()
    distributed.check_process_count(str(tmp_path / "fresh"))  # a new run records its count
    assert (tmp_path / "fresh" / "processes.txt").read_text().strip() == "1"


def test_a_killed_process_ends_the_other_within_the_heartbeat_bound(tmp_path):
    """Process 1 is killed once the step-1 checkpoint is on disk; process 0 exits with an
    error within the heartbeat timeout (15 s here) plus a margin, instead of hanging in a
    collective; the checkpoint the kill left is whole (a rerun resumes from it as from any:
    the resume itself is test_two_processes_equal_one_and_resume's)."""
    run_dir = tmp_path / "run"
    args = COMMON + ["num_steps=40", "checkpoint.every_steps=1", "warmup.steps=0",
                     "eval.num_problems=0"]
    procs = _start(run_dir, args, 2, heartbeat_s=15)
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "1").is_dir():  # orbax renames it when complete
        assert time.monotonic() < deadline and procs[0].poll() is None
        time.sleep(0.2)
    procs[1].send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    out, _ = procs[0].communicate(timeout=120)
    waited = time.monotonic() - t0
    print(f"the survivor exited {waited:.1f} s after the kill, code {procs[0].returncode}:"
          f" {out[-300:]}")
    assert procs[0].returncode != 0 and waited < 15 + 45, (waited, out[-2000:])
    procs[1].wait()
    from rlvr_jax.checkpoint import read_params

    params, step = read_params(str(run_dir), 1)
    assert step == 1 and all(np.isfinite(x).all() for x in jax.tree.leaves(params))


def _rows(run_dir) -> list[dict]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def test_a_sweep_through_the_submitit_launcher_writes_both_runs(tmp_path):
    """`-m hydra/launcher=local` (hydra-submitit-launcher's local executor): two sweep points,
    each its own process, each ends with its summary."""
    env = xla_env(2, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr_jax.train", "-m", "hydra/launcher=local", *COMMON,
         "num_steps=1", "warmup.steps=0", "eval.num_problems=0", "seed=0,1"], cwd=tmp_path,
        env=env,
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summaries = sorted((tmp_path / "multirun").rglob("summary.json"))
    assert len(summaries) == 2, sorted(str(p) for p in (tmp_path / "multirun").rglob("*"))[:40]
    assert {json.loads(p.read_text())["train/steps"] for p in summaries} == {1}
