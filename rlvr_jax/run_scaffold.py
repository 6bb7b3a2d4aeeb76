"""The run's life, shared below every job (rl in loop.py; reward_model and dpo in
preference_runs.py; an asynchronous RL loop later): one home for what a run does around its
steps, so no job carries a copy.

    run(cfg, jobs)  run directory, processes joined, lock, stop signals, watchdog, the
                    finished-run check, then `jobs[cfg.job](cfg, session)`
    outputs(...)    run_config.json, the checkpointer and the tracker
    resume(...)     the last checkpoint's train and loop state (or the fresh ones), and the
                    wall seconds of earlier invocations; metrics.jsonl cut back to it
    stopped(...)    the tail of a run stopped early: checkpoint flushed, wall time, message
    write_summary   summary.json

Rerunning the same command in the same run directory resumes from the last checkpoint (and
says so); it never silently restarts at step 0. One run holds a directory at a time
(run_control.RunLock); SIGTERM or a first Ctrl-C ends the run after the step in flight with a
checkpoint (run_control.StopSignals); a finished run says so.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import nullcontext
from typing import Callable, Mapping, NamedTuple

import jax
import numpy as np

from rlvr_jax import distributed, perf, run_control, tracking
from rlvr_jax.checkpoint import Checkpointer, abstract_like
from rlvr_jax.config import ConfigError, RunConfig, as_dict, warmstart_key
from rlvr_jax.config import changes
from rlvr_jax.sandbox import bwrap
from rlvr_jax.types import LoopState


class Session(NamedTuple):
    """What the scaffold hands a job."""

    stop_requested: Callable[[], bool]  # asked once per step by every process (they agree)
    stop_reason: Callable[[], str]  # why the run stops early: a signal, or stop_after_steps
    t_start: float  # perf_counter at the job's start (its wall time counts from here)


Job = Callable[[RunConfig, Session], dict]


def run(cfg: RunConfig, jobs: Mapping[str, Job]) -> dict:
    """Run `jobs[cfg.job]` in `cfg.run_dir`, resuming what is there. Returns the summary, or
    {"stopped_at_step": k, ...} when stopped early (stop_after_steps, SIGTERM, Ctrl-C)."""
    os.makedirs(cfg.run_dir, exist_ok=True)
    d = cfg.distributed  # several processes: join them first, before any device is touched
    distributed.initialize(d.coordinator_address, d.num_processes, d.process_id,
                           d.heartbeat_timeout_s, d.init_timeout_s)
    # One lock per run, held by the writer: the run's other processes share its directory.
    lock = run_control.RunLock(cfg.run_dir) if distributed.is_writer() else nullcontext()
    timeout = d.step_timeout_s if d.step_timeout_s >= 0 else (
        1800 if jax.process_count() > 1 else 0)
    with lock, run_control.StopSignals() as stop, run_control.Watchdog(timeout) as watchdog:
        distributed.check_process_count(cfg.run_dir)
        done = finished_summary(cfg.run_dir, cfg.total_steps)
        if done is not None:
            diff = changes.differences(recorded_config(cfg.run_dir) or as_dict(cfg),
                                       as_dict(cfg), resolved=False)
            if diff and not cfg.allow_config_changes:  # never a silent no-op of a new command
                raise ConfigError(
                    f"config key '{diff[0][0]}': {cfg.run_dir} holds a finished run with other "
                    f"values ({changes.describe(diff)}); use another run directory to run "
                    "these, or rerun with the recorded values to see its results")
            print(finished_message(cfg, done, diff), flush=True)
            return done
        try:
            session = Session(_stop_requested(stop, watchdog.kick),
                              lambda: stop.requested or "stop_after_steps", time.perf_counter())
            return jobs[str(cfg.job)](cfg, session)
        except run_control.Stopped as e:
            print(e, flush=True)
            return {"stopped_at_step": 0, "reason": str(e)}


def _stop_requested(stop: run_control.StopSignals, progress):
    def stop_requested() -> bool:
        """Asked once per step (RL, reward model or warm-up) by every process: they agree,
        and the watchdog (distributed.step_timeout_s) sees progress."""
        progress()
        return distributed.any_process(stop.requested is not None)

    return stop_requested


def finished_summary(run_dir: str, num_steps: int) -> dict | None:
    """The summary of a run in `run_dir` that completed `num_steps` steps, else None."""
    path = os.path.join(run_dir, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        summary = json.load(f)
    return summary if summary.get("train/steps") == num_steps else None


def finished_message(cfg: RunConfig, done: dict, diff: list = ()) -> str:
    """What a rerun of a finished run says; `diff`: how this command's config differs from
    the run's (changes.differences), named so that a changed command is not silently a no-op."""
    where = os.path.abspath(cfg.run_dir)
    differ = (f"\nnote: this command differs from the finished run in "
              f"{changes.describe(diff)} (allow_config_changes=true); it trained with the "
              "recorded values (a new run directory runs the new ones)") if diff else ""
    if "eval/greedy_accuracy_end" not in done and (str(cfg.job) != "rl"
                                                    or "compiles" not in done):
        return f"run {where} is complete: {json.dumps(done)}{differ}"
    table = format_table(done, cfg.eval.num_problems, cfg.eval.sampled_per_problem,
                         cfg.total_steps)
    return (f"run {where} is complete ({cfg.total_steps} steps):\n{table}\nnothing to do "
            f"(delete the directory, or change the command, to run again){differ}")


def format_table(summary: dict, num_problems: int, sampled_per_problem: int,
                 num_steps: int) -> str:
    """The held-out accuracy table a run prints at its end (and a rerun of a finished one)."""
    s = summary
    wall = (f"wall time {s['train/wall_seconds']:.0f}s (warm start, evaluations and {num_steps} "
            f"RL steps, every invocation); compiles {s['compiles']}")
    if "eval/greedy_accuracy_end" not in s:
        return f"no held-out evaluation (eval.num_problems=0)\n{wall}"
    learned = ([f"{'  reward model score (sampled)':<40}"
                f"{s['eval/sampled_learned_reward_start']:10.3f} "
                f"{s['eval/sampled_learned_reward_end']:6.3f}"]
               if "eval/sampled_learned_reward_end" in s else [])
    return "\n".join([
        f"held-out accuracy ({num_problems} problems)      before RL     end",
        f"  greedy                                {s['eval/greedy_accuracy_start']:10.3f} "
        f"{s['eval/greedy_accuracy_end']:6.3f}",
        f"  sampled (T=1, {sampled_per_problem}/problem)               "
        f"{s['eval/sampled_accuracy_start']:10.3f} {s['eval/sampled_accuracy_end']:6.3f}",
        *learned,
        wall,
    ])


def eval_line(step: int, result: dict) -> str:
    """A mid-run held-out evaluation, for the console (metrics.jsonl has all of it)."""
    return (f"eval at step {step}: greedy {result['greedy_accuracy']:.3f}  sampled "
            f"{result['sampled_accuracy']:.3f}")


# ---------------------------------------------------------------------- a job's outputs
HOST = "host"  # run_config.json's record of the host (the sandbox's containment), not config


def recorded_config(run_dir: str) -> dict | None:
    path = os.path.join(run_dir, "run_config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return {k: v for k, v in json.load(f).items() if k != HOST}


def outputs(cfg: RunConfig) -> tuple[Checkpointer, tracking.Tracker]:
    """run_config.json (the resolved config: the model read from model.path), the
    checkpointer (with the shared warm-start folder, if any) and the tracker. A run directory
    that already holds a run is resumed only with the same result-changing keys (`check_same_config`)."""
    w = cfg.warmup
    ckpt = Checkpointer(cfg.run_dir, cfg.checkpoint.every_steps, cfg.checkpoint.max_to_keep,
                        os.path.join(w.shared_dir, warmstart_key(cfg)) if w.shared_dir else None)
    check_same_config(cfg, ckpt.latest_step() or 0)
    distributed.barrier("config_checked")  # every process has read the recorded config
    sandbox = bwrap.containment()  # this host's, recorded with the run (not a config key)
    device = jax.devices()[0]  # the peak MFU is relative to; a CPU's probed now, before work
    host = {"sandbox": sandbox, "device_kind": device.device_kind,
            "peak_flops": perf.peak_flops(device.device_kind, device.platform),
            "peak_flops_is": perf.peak_source(device.platform)}
    distributed.publish(os.path.join(cfg.run_dir, "run_config.json"),
                        json.dumps(as_dict(cfg) | {HOST: host}, indent=2))
    tracker = tracking.for_process(
        distributed.is_writer(), cfg.run_dir, mode=cfg.logger.mode, project=cfg.logger.project,
        entity=cfg.logger.entity, name=cfg.name, config=as_dict(cfg),
        total_steps=cfg.total_steps, progress_bar=cfg.logger.progress_bar)
    tracker.write(f"sandbox: {sandbox}")
    return ckpt, tracker


def check_same_config(cfg: RunConfig, from_step: int) -> None:
    """Refuse to resume the run in `cfg.run_dir` with other result-changing keys than it
    recorded (one line naming them), unless `allow_config_changes`: then the change is
    appended to config_changes.jsonl with the step it applies from. Every process reads the
    same file and decides the same."""
    recorded = recorded_config(cfg.run_dir)
    diff = [] if recorded is None else changes.differences(recorded, as_dict(cfg))
    if not diff:
        return
    if not cfg.allow_config_changes:
        raise ConfigError(
            f"config key '{diff[0][0]}': {cfg.run_dir} holds a run started with other values "
            f"({changes.describe(diff)}); rerun with the recorded values, use another run "
            "directory, or pass allow_config_changes=true to change them from step "
            f"{from_step} on (recorded in config_changes.jsonl)")
    if distributed.is_writer():
        with open(os.path.join(cfg.run_dir, "config_changes.jsonl"), "a") as f:
            f.write(json.dumps({"from_step": from_step, "changes": {
                k: {"before": old, "after": new} for k, old, new in diff}}) + "\n")


def fresh_loop(seed: int, kl_coef: float = 0.0) -> LoopState:
    """The loop state of a run at step 0."""
    return LoopState(0, 0, np.asarray(jax.random.key_data(jax.random.key(seed))), kl_coef, None)


class Resumed(NamedTuple):
    state: object
    loop: LoopState
    wall_before: float  # wall seconds of earlier invocations of this run


def resume(ckpt: Checkpointer, tracker: tracking.Tracker, state, loop: LoopState,
           run_dir: str, total_steps: int) -> Resumed:
    """The last checkpoint's (train state, loop state), else the fresh ones given.
    metrics.jsonl loses the rows after that checkpoint: the resumed run logs those again."""
    wall_before = 0.0
    latest = ckpt.latest_step()
    if latest is not None:
        state, loop = ckpt.restore(latest, abstract_like(state))
        wall_before = read_wall(run_dir)
        tracker.write(f"RESUMING from checkpoint step {latest} in {ckpt.directory} "
                      f"({total_steps - loop.step} of {total_steps} steps left)")
    tracker.truncate_after(loop.step)
    return Resumed(state, loop, wall_before)


def last_step(loop_step: int, total_steps: int, stop_after_steps: int) -> int:
    """Where this invocation stops: the run's end, or `stop_after_steps` further on."""
    return min(total_steps, loop_step + stop_after_steps) if stop_after_steps else total_steps


def wall_writer(run_dir: str) -> Callable[[float], None]:
    """Records the run's wall seconds (all invocations) beside its checkpoints; the writer
    process only."""
    if not distributed.is_writer():
        return lambda seconds: None
    return lambda seconds: write_wall(run_dir, seconds)


def stopped(ckpt: Checkpointer, tracker: tracking.Tracker, write_wall: Callable[[float], None],
            wall: float, last: int, why: str | None) -> dict:
    """A run stopped before its end: the checkpoint written, the wall time recorded, the way
    to resume said (with the reason, when the job reports one: the RL job does)."""
    ckpt.close()  # waits for the checkpoint being written
    write_wall(wall)
    tracker.write(f"stopped after step {last}{f' ({why})' if why else ''}; checkpoint in "
                  f"{ckpt.directory}; rerun the same command to resume")
    tracker.close()
    return {"stopped_at_step": last} | ({"reason": why} if why else {})


def write_summary(run_dir: str, summary: dict) -> None:
    distributed.publish(os.path.join(run_dir, "summary.json"), json.dumps(summary, indent=2))


def read_wall(run_dir: str) -> float:
    path = os.path.join(run_dir, "wall_seconds.json")
    if not os.path.exists(path):
        return 0.0
    with open(path) as f:
        return float(json.load(f)["wall_seconds"])


def write_wall(run_dir: str, seconds: float) -> None:
    distributed.publish(os.path.join(run_dir, "wall_seconds.json"),
                        json.dumps({"wall_seconds": seconds}))
