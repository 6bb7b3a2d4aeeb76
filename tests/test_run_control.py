"""A run's life through the entry point, as a user meets it (subprocesses: exit codes and
signals are the point): stop_after_steps then the plain command resumes in the same directory;
SIGTERM mid-run checkpoints and the rerun ends with the uninterrupted run's parameters; a
finished run says so; one run per directory; user errors in one line; a wheel trains."""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from rlvr_jax import loop, run_control
from tests.helpers import ROOT, TINY, xla_env

pytestmark = pytest.mark.slow  # see pyproject.toml: not in the daily `-m "not slow"` run

ENV = xla_env(8)


def _train(args, cwd=ROOT, timeout=600, **kw):
    return subprocess.run([sys.executable, "-m", "rlvr_jax.train", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=timeout, **kw)


def _cmd(tmp_path, steps=4, preset="math_grpo"):
    """A tiny run; its directory is Hydra's, from the overrides (no hydra.run.dir)."""
    return [f"+experiment={preset}", f"num_steps={steps}", *TINY,
            "verifier.reward_scheme=format_penalty", f"warmup.shared_dir={tmp_path / 'warm'}",
            f"name=t{os.getpid()}"]


def _run_dir(cwd):
    dirs = [os.path.join(r, d) for r, ds, _ in os.walk(os.path.join(cwd, "runs")) for d in ds
            if os.path.exists(os.path.join(r, d, "run_config.json"))]
    assert len(dirs) == 1, dirs
    return dirs[0]


def _final_params(run_dir, step):
    with ocp.StandardCheckpointer() as c:
        state = c.restore(os.path.join(run_dir, "checkpoints", str(step), "state"))
    return state["params"] if isinstance(state, dict) else state[1]


def _steps(run_dir):
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return [r["step"] for r in rows if "reward/mean" in r], rows


def test_stop_after_steps_exits_0_and_the_plain_command_resumes(tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    first = _train(_cmd(tmp_path) + ["stop_after_steps=2", "logger=offline"], cwd=cwd)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "stopped after step 2 (stop_after_steps)" in first.stdout + first.stderr
    run_dir = _run_dir(cwd)
    second = _train(_cmd(tmp_path), cwd=cwd)  # the plain command: same directory
    assert second.returncode == 0, second.stderr[-3000:]
    assert _run_dir(cwd) == run_dir
    assert "RESUMING from checkpoint step 2" in second.stdout + second.stderr
    steps, rows = _steps(run_dir)
    assert steps == [1, 2, 3, 4], "every step once in metrics.jsonl"
    log = open(os.path.join(run_dir, "train.log")).read()  # Hydra's log holds the run's lines
    assert "RESUMING from checkpoint step 2" in log and "step 4/4" in log
    assert sum("eval/sampled_accuracy" in r and r["step"] == 0 for r in rows) == 1
    third = _train(_cmd(tmp_path), cwd=cwd)  # finished: says so, evaluates nothing
    assert third.returncode == 0 and "is complete (4 steps)" in third.stdout, third.stderr[-2000:]
    assert _steps(run_dir)[0] == [1, 2, 3, 4]
    # Issue 26: the directory records the command's overrides in full (its name leaves out
    # those that change no result: num_steps, stop_after_steps, logger).
    recorded = open(os.path.join(run_dir, "overrides.txt")).read().splitlines()
    assert "num_steps=4" in recorded and "stop_after_steps=2" in recorded
    assert "num_steps" not in os.path.basename(run_dir)
    # Train longer: the same run, extended on purpose; without the flag, refused by name.
    longer = _train(_cmd(tmp_path, 5), cwd=cwd)
    assert longer.returncode == 2 and "num_steps: 4 -> 5" in longer.stderr.splitlines()[-1]
    longer = _train(_cmd(tmp_path, 5) + ["allow_config_changes=true"], cwd=cwd)
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert _run_dir(cwd) == run_dir and _steps(run_dir)[0] == [1, 2, 3, 4, 5]
    assert "RESUMING from checkpoint step 4" in longer.stdout + longer.stderr


# Commands that fail on their input: one process runs them all (tests/helpers.py:
# entry_point_commands), each as `python -m rlvr_jax.train` would, in its own directory.
USER_ERRORS = {
    "model.path": (["model.path=/no/such/model"], "/no/such/model"),
    "verifier.kind": (["+experiment=math_grpo", "verifier=code"], "verifier.kind"),
    "samples_per_prompt": (["+experiment=math_grpo", "algo.samples_per_prompt=1"],
                           "algo.samples_per_prompt"),
    "eval_batch": (["+experiment=math_grpo", "eval.sequences_per_batch=12"],
                   "eval.sequences_per_batch"),
    "mesh": (["mesh.data=3"], "must equal the device count"),
    "process_id": (["distributed.num_processes=2"], "distributed.process_id"),
}
COMPOSITION_ERRORS = {"preset": (["+experiment=no_such_preset"], "no_such_preset"),
                      "key": (["no_such_key=1"], "no_such_key")}


@pytest.fixture(scope="module")
def failed_commands(tmp_path_factory):
    """name -> (the command's result, the words it must say, the directory it ran in)."""
    from tests.helpers import entry_point_commands, make_tiny_gsm8k

    root = tmp_path_factory.mktemp("failed")
    tiny = make_tiny_gsm8k(root / "tiny")
    cases = {name: (args + [f"hydra.run.dir={root / name / 'run'}"], words, root / name)
             for name, (args, words) in {**USER_ERRORS, **COMPOSITION_ERRORS}.items()}
    cases["input:config"] = (_cmd(root) + ["algo.samples_per_prompt=1"],
                             "algo.samples_per_prompt", root / "config")
    cases["input:data"] = (["+experiment=gsm8k_grpo", f"model.path={tiny / 'model'}",
                            f"task.train_path={tiny / 'data' / 'train.jsonl'}",
                            "task.test_path=/no/such.jsonl"], "/no/such.jsonl", root / "data")
    for _, _, cwd in cases.values():
        cwd.mkdir()
    results = entry_point_commands([(args, cwd) for args, _, cwd in cases.values()], ENV)
    return {name: (result, words, cwd)
            for (name, (_, words, cwd)), result in zip(cases.items(), results)}


FAILED = pytest.mark.xdist_group("failed_commands")  # one worker runs the fixture's process


@FAILED
@pytest.mark.parametrize("data", [False, True], ids=["config", "data"])
def test_a_command_that_fails_on_its_input_leaves_no_directory(failed_commands, data):
    """Issue 26: every failed config attempt left a run directory (Hydra's files) behind;
    issue 38: one that failed loading its data, after the run took its lock, left one with
    the lock and the process count."""
    proc, key, cwd = failed_commands["input:data" if data else "input:config"]
    assert proc["code"] == 2 and key in proc["stderr"], proc["stderr"][-2000:]
    left = [os.path.join(r, d) for r, ds, _ in os.walk(cwd / "runs") for d in ds
            if not os.listdir(os.path.join(r, d)) or ".hydra" in os.listdir(os.path.join(r, d))]
    assert left == []


ASYNC = ["rollout.off_policy_steps=1", "algo.loss.correction=token"]
# A stateful environment (a sandbox session per episode, python_repl), asynchronous: the
# batch in flight at the signal is abandoned (its sessions closed) and sampled again from its
# checkpointed snapshot on resume, its episodes from their start.
STATEFUL = ["preset=repl_agent", *ASYNC, "warmup.steps=40", "sampling.max_new_tokens=80",
            "env.session.spares=16"]


# Asynchronous rollouts are run with the stateful environment (one run covers both: the loop
# does not branch on either; test_rollouts.py stops and resumes a plain async run too, and
# test_stop_after_steps a synchronous one through the entry point; the signal's path is the
# same in every mode, so the synchronous case was dropped for the suite's time).
def test_sigterm_checkpoints_and_the_rerun_matches_an_uninterrupted_run(tmp_path):
    """SIGTERM after step 2 of 4: exit 0 with one line, a checkpoint, no orbax temp files;
    the rerun ends bitwise where a run without the signal ends. Asynchronous: the batch in
    flight at the signal is abandoned and sampled again from its checkpointed snapshot."""
    from tests.helpers import UNAVAILABLE

    if UNAVAILABLE:
        pytest.skip(f"no sandbox: {UNAVAILABLE}")
    preset = "repl_agent"
    extra = [x for x in STATEFUL if not x.startswith("preset=")] + ["eval.num_problems=0"]
    steps = 4
    whole = tmp_path / "whole"
    assert _train(_cmd(tmp_path, steps, preset) + extra +
                  [f"hydra.run.dir={whole}"]).returncode == 0
    cut = tmp_path / "cut"
    proc = subprocess.Popen([sys.executable, "-m", "rlvr_jax.train",
                             *_cmd(tmp_path, steps, preset), *extra, f"hydra.run.dir={cut}"],
                            cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # wait for step 2's row
        if (cut / "metrics.jsonl").exists() and 2 in _steps(cut)[0]:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert "SIGTERM: finishing the current step" in out and "Traceback" not in out
    stopped_at = max(int(d) for d in os.listdir(cut / "checkpoints") if d.isdigit())
    assert 2 <= stopped_at < steps
    assert not list(cut.rglob("*.orbax-checkpoint-tmp*"))
    assert (cut / "checkpoints" / str(stopped_at) / "behind").is_dir()
    rerun = _train(_cmd(tmp_path, steps, preset) + extra + [f"hydra.run.dir={cut}"])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                 _final_params(cut, steps), _final_params(whole, steps))
    assert _steps(cut)[0] == list(range(1, steps + 1))
    # The sessions were used, and none was left behind.
    rows = [json.loads(line) for line in (cut / "metrics.jsonl").read_text().splitlines()]
    steps_rows = [r for r in rows if "session/opened" in r]
    assert any(r["episode/tool_calls_mean"] > 0 for r in steps_rows)
    assert all(r["session/leaked"] == 0 for r in steps_rows)


def test_a_second_run_on_a_locked_directory_stops_at_once(tmp_path):
    run_dir = tmp_path / "run"
    with run_control.RunLock(str(run_dir)):
        t0 = time.monotonic()
        proc = _train(_cmd(tmp_path) + [f"hydra.run.dir={run_dir}"])
        assert time.monotonic() - t0 < 60
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: run directory") and f"process {os.getpid()}" in lines[-1]
    assert "Traceback" not in proc.stderr


@FAILED
@pytest.mark.parametrize("name", USER_ERRORS)
def test_user_errors_are_one_line(failed_commands, name):
    proc, words, _ = failed_commands[name]
    assert proc["code"] != 0 and "Traceback" not in proc["stderr"], proc["stderr"][-2000:]
    assert words in proc["stderr"].strip().splitlines()[-1]
    assert proc["code"] == 2  # a user error, as the docs say (1 is for bugs)


@FAILED
@pytest.mark.parametrize("name", COMPOSITION_ERRORS)
def test_hydra_composition_errors_exit_2(failed_commands, name):
    """Issue 26: Hydra's own composition errors (its message, the options it lists) exited 1,
    the code of a bug."""
    proc, words, _ = failed_commands[name]
    assert proc["code"] == 2 and "Traceback" not in proc["stderr"], proc["stderr"][-2000:]
    assert words in proc["stderr"]


def test_a_built_wheel_trains_in_a_fresh_venv(tmp_path):
    """`pip wheel` -> a venv (dependencies from this environment, nothing downloaded) -> two
    steps from a directory that holds no conf/: the package finds its own configs."""
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-build-isolation", ROOT, "-w", str(wheels)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    py = str(venv / "bin" / "python")
    install = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                              *map(str, wheels.glob("*.whl"))], capture_output=True, text=True,
                             timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    # Every config file ships, nested groups (hydra/launcher/) included.
    shipped = subprocess.run([py, "-c", "import os; from rlvr_jax.config import conf_dir; "
                              "d = conf_dir(); print(sorted(os.path.relpath(os.path.join(r, f), "
                              "d) for r, _, fs in os.walk(d) for f in fs if f.endswith('.yaml')))"],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)
    here = sorted(os.path.relpath(os.path.join(r, f), os.path.join(ROOT, "conf"))
                  for r, _, fs in os.walk(os.path.join(ROOT, "conf")) for f in fs
                  if f.endswith(".yaml"))
    assert shipped.stdout.strip() == str(here), shipped.stdout + shipped.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    # format_penalty: a 12-step warm start is never right, but the reward still separates
    # well-formed from malformed answers, so the advantages are not all zero.
    proc = subprocess.run([py, "-m", "rlvr_jax.train", *_cmd(tmp_path, 2), "eval.every_steps=1",
                           "algo.optim.lr_warmup_steps=0"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = _run_dir(elsewhere)
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert all(np.isfinite(summary[k]) for k in loop.SUMMARY_KEYS)
    assert summary["compiles"]["train_step"] == 1 and summary["compiles"]["sampler"] == 1
    steps, rows = _steps(run_dir)
    assert steps == [1, 2] and [r["step"] for r in rows if "eval/sampled_accuracy" in r] == [0, 1, 2]
    for key in ("reward/accuracy", "status/pass", "status/wrong", "status/unparseable",
                "train/approx_kl_old", "train/clip_frac_low", "train/clip_frac_high",
                "train/entropy", "response/length_mean", "time/sample_s", "time/verify_s",
                "time/update_s", "throughput/generated_tokens_per_s", "perf/mfu_update",
                "perf/mfu_sample", "perf/tflops_update"):
        assert key in rows[-2] or key in rows[-1], key
    step_rows = [r for r in rows if "reward/mean" in r]
    assert all(r["perf/mfu_update"] > 0 and r["perf/mfu_sample"] > 0 for r in step_rows)
    assert sum(step_rows[0][f"status/{s}"] for s in ("pass", "wrong", "unparseable")) == 16
    warm_dir = next((tmp_path / "warm").iterdir())
    with ocp.StandardCheckpointer() as c:
        warm = c.restore(str(warm_dir))
    moved = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()),
                         warm, _final_params(run_dir, 2)["policy"])
    assert max(jax.tree.leaves(moved)) > 0, "two RL steps left every parameter unchanged"
    where = subprocess.run([py, "-c", "import rlvr_jax, os; print(os.path.dirname("
                                      "rlvr_jax.__file__))"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, timeout=60).stdout.strip()
    assert str(venv) in where, where  # the installed copy, not the checkout
    assert (elsewhere / "runs").exists()


def test_the_watchdog_fires_without_progress_and_not_with_it():
    fired = []
    with run_control.Watchdog(0.4, on_expire=lambda: fired.append(1)) as dog:
        for _ in range(8):
            time.sleep(0.1)
            dog.kick()
        assert not fired
        time.sleep(1.2)
    assert fired == [1]
    with run_control.Watchdog(0, on_expire=lambda: fired.append(2)):  # 0: off
        time.sleep(0.3)
    assert fired == [1]


def test_a_stuck_process_exits_with_one_line():
    """The default expiry: one line naming the config key, exit code 3 (the run's other
    processes then stop through JAX's heartbeats)."""
    code = ("import time\nfrom rlvr_jax.run_control import Watchdog\n"
            "with Watchdog(0.5):\n    time.sleep(30)\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 3 and time.monotonic() - t0 < 15
    assert "distributed.step_timeout_s" in proc.stderr.strip().splitlines()[-1]
