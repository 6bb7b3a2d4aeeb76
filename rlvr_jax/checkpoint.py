"""The only file that touches orbax.

A run directory holds `checkpoints/<step>/{state,loop}` written by an orbax CheckpointManager
(async: the device-to-host copy happens before `save` returns, the disk write overlaps the next
steps) and `warmstart/`, the policy after the supervised warm start, which is also the frozen
reference policy. Restores go straight onto the mesh: the caller passes abstract arrays that
carry their target shardings.

A warm start kept in a shared folder (`warmup.shared_dir`, one per seed and warm-start
settings, reused by every run of a sweep) is written under a name of its own and renamed into
place when complete: jobs of a parallel sweep that build it at once never collide (the first
rename wins; the others' copies, equal to it, are dropped), and a half-written one is never
read. The run directory records where its warm start is (`warmstart_dir.txt`), so export and
evaluation find it there too.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import os
import shutil
import sys
import threading
import traceback
from typing import Any, Callable, Iterator, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

from rlvr_jax import distributed, dynamic_sampling
from rlvr_jax.types import LoopState, TrainState


# Replica-parallel saving (orbax's default: each replica of a replicated array copies its own
# slice to the host) only for slices of 1 MiB and more. Below that it buys no bandwidth, and
# each slice is a program of its own for each device: the first save of a tiny model's
# replicated params on 8 devices compiled 56 of them (2 s, against 0.03 s without). Otherwise
# orbax's own handler: the same files (its array metadata store, which its default handler is
# built with, kept). Orbax warns on every override: not the user's concern.
def _register_array_handler() -> None:
    default = ocp.type_handlers.get_type_handler(jax.Array)
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        ocp.type_handlers.register_type_handler(jax.Array, ocp.type_handlers.ArrayHandler(
            array_metadata_store=getattr(default, "_array_metadata_store", None),
            min_slice_bytes_for_replica_parallel=1 << 20), override=True)
    finally:
        absl.setLevel(level)


_register_array_handler()


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be read; the message names its path."""


def _unreadable(what: str, path: str, e: Exception, advice: str = "") -> CheckpointError:
    """One line for a checkpoint orbax could not read: the path and the cause's first line
    (without TensorStore's spec dump)."""
    cause = (str(e).strip().splitlines() or [""])[0].split(" See full TensorStore details")[0]
    # The failed read's frames hold its other coroutines and TensorStore futures: let them go
    # now, while `_quiet_leftovers`'s filter is in place, not at the process's exit (Python
    # restores the default hooks before it collects them there).
    traceback.clear_frames(e.__traceback__)
    gc.collect()
    return CheckpointError(f"cannot {what} {path}: {type(e).__name__}: "
                           f"{cause.rstrip('.')[:300]}{advice}")


_TRACEBACK = "Traceback (most recent call last):"


class _DropClosedLoopTracebacks:
    """sys.stderr, less the "Event loop is closed" tracebacks TensorStore prints when a read
    still in flight completes into orbax's event loop after orbax closed it (one array's read
    failed and ended the restore). Its callbacks write through sys.stderr from their own
    threads, so each thread's lines are looked at separately; a traceback is held until its
    last line says what it is, and everything else passes at once."""

    def __init__(self, stream):
        self._stream, self._lock = stream, threading.Lock()
        self._partial: dict[int, str] = {}
        self._block: dict[int, list[str]] = {}

    def write(self, text: str) -> int:
        tid = threading.get_ident()
        with self._lock:
            pending = self._partial.pop(tid, "") + text
            *lines, rest = pending.split("\n")
            for line in lines:
                self._line(tid, line + "\n")
            if rest and (tid in self._block or _TRACEBACK.startswith(rest)):
                self._partial[tid] = rest  # may be a traceback's start: wait for the line
            elif rest:
                self._stream.write(rest)
        return len(text)

    def _line(self, tid: int, line: str) -> None:
        block = self._block.get(tid)
        if block is None:
            if line.rstrip("\n") == _TRACEBACK:
                self._block[tid] = [line]
            else:
                self._stream.write(line)
        elif line[:1].isspace():
            block.append(line)
        else:  # the exception's own line ends the traceback
            del self._block[tid]
            asyncio_closed = (line.strip() == "RuntimeError: Event loop is closed"
                              and any(f"{os.sep}asyncio{os.sep}" in b for b in block))
            if not asyncio_closed:
                self._stream.write("".join(block) + line)

    def __getattr__(self, name):  # flush, fileno, isatty, encoding: the stream's
        return getattr(self._stream, name)


class _DropOrbaxTaskLeftovers(logging.Filter):
    """asyncio's "Task exception was never retrieved" for orbax's own read tasks (the failed
    read's siblings, collected after it ended): the error line already says what failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Task exception was never retrieved")
                    and f"{os.sep}orbax{os.sep}" in text)


_ORBAX_TASKS = _DropOrbaxTaskLeftovers()


@contextlib.contextmanager
def _quiet_leftovers() -> Iterator[None]:
    """Around an orbax read. When one array's read fails, the read's other coroutines are never
    awaited (Python prints each one's traceback when it is collected) and its reads still in
    flight print "Event loop is closed" tracebacks; its failed tasks, collected later, are
    logged by asyncio as exceptions never retrieved: many tracebacks around the one error line.
    Those three, and nothing else, are dropped; after a failed read the filters stay (the
    process is about to report the error and end)."""
    unraisable_before, stderr_before = sys.unraisablehook, sys.stderr

    def unraisable_hook(unraisable):
        code = getattr(unraisable.object, "cr_code", None)
        if code is None or f"{os.sep}orbax{os.sep}" not in code.co_filename:
            unraisable_before(unraisable)

    sys.unraisablehook, sys.stderr = unraisable_hook, _DropClosedLoopTracebacks(stderr_before)
    logging.getLogger("asyncio").addFilter(_ORBAX_TASKS)
    yield  # an exception leaves the filters in place
    sys.unraisablehook, sys.stderr = unraisable_before, stderr_before
    logging.getLogger("asyncio").removeFilter(_ORBAX_TASKS)


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) for restoring onto the same layout as `tree`."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


class Checkpointer:
    def __init__(self, run_dir: str, every_steps: int, max_to_keep: int,
                 warmstart_dir: Optional[str] = None):
        self.directory = os.path.abspath(os.path.join(run_dir, "checkpoints"))
        self.warmstart_dir = os.path.abspath(warmstart_dir or os.path.join(run_dir, "warmstart"))
        # The run's own name for a warm start it writes: the same in all its processes (orbax
        # saves collectively), another in each run of a sweep.
        tag = hashlib.blake2b(os.path.abspath(run_dir).encode(), digest_size=6).hexdigest()
        self._partial = f"{self.warmstart_dir}.partial-{tag}"
        if distributed.is_writer():
            os.makedirs(run_dir, exist_ok=True)
        distributed.publish(os.path.join(run_dir, WARMSTART_POINTER), self.warmstart_dir + "\n")
        self.every_steps = every_steps
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                 enable_async_checkpointing=True))

    # ------------------------------------------------------------------ RL state
    def latest_step(self) -> Optional[int]:
        return self._manager.latest_step()

    def maybe_save(self, step: int, state: TrainState, loop: LoopState, force: bool = False,
                   behind: Optional[tuple] = (), carried: Optional[Callable] = None) -> bool:
        """Save after `step` completed steps when due (every N) or forced; returns whether saved.
        `behind`: asynchronous rollouts' params snapshots (rollouts.py), saved with the state;
        `carried()`: what a carried stream has in flight (JSON, or None: carry.py)."""
        if not force and step % self.every_steps:
            return False
        if self._manager.latest_step() == step:
            return False
        loop_json = {"step": int(loop.step), "problems_consumed": int(loop.problems_consumed),
                     "rng_key": np.asarray(loop.rng_key).tolist(), "kl_coef": float(loop.kl_coef),
                     "carry": dynamic_sampling.to_json(loop.carry)}
        items = dict(state=ocp.args.StandardSave(state), loop=ocp.args.JsonSave(loop_json))
        if behind:
            items["behind"] = ocp.args.StandardSave(list(behind))
        in_flight = carried() if carried is not None else None
        if in_flight is not None:
            items["carried"] = ocp.args.JsonSave(in_flight)
        self._manager.save(step, args=ocp.args.Composite(**items))
        return True

    def restore(self, step: int, abstract_state: Any) -> tuple[TrainState, LoopState]:
        path = os.path.join(self.directory, str(step))
        try:
            with _quiet_leftovers():
                out = self._manager.restore(step, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract_state), loop=ocp.args.JsonRestore()))
        except Exception as e:  # orbax raises many types; the user needs the path and the cause
            raise _unreadable("restore checkpoint", path, e, ". Delete that step directory to "
                              "fall back to the previous checkpoint.") from e
        loop = out["loop"]
        return TrainState(*out["state"]), LoopState(
            int(loop["step"]), int(loop["problems_consumed"]),
            np.asarray(loop["rng_key"], dtype=np.uint32), float(loop.get("kl_coef", 0.0)),
            dynamic_sampling.from_json(loop.get("carry")))

    def restore_behind(self, step: int, abstract: list) -> Optional[tuple]:
        """Checkpoint `step`'s asynchronous-rollout snapshots onto `abstract`'s shardings, or
        None when it has none (saved by a synchronous run)."""
        path = os.path.join(self.directory, str(step))
        if _saved_list_length(os.path.join(path, "behind")) != len(abstract):
            return None  # none saved, or another count (a resume that changed it)
        try:
            with _quiet_leftovers():
                out = self._manager.restore(step, args=ocp.args.Composite(
                    behind=ocp.args.StandardRestore(list(abstract))))
        except Exception as e:
            raise _unreadable("restore checkpoint", path, e, ". Delete that step directory to "
                              "fall back to the previous checkpoint.") from e
        return tuple(out["behind"])

    def restore_carried(self, step: int) -> Optional[dict]:
        """Checkpoint `step`'s carried stream (carry.state), or None when it has none."""
        path = os.path.join(self.directory, str(step), "carried")
        if not step or not os.path.isdir(path):
            return None
        try:
            with _quiet_leftovers():
                out = self._manager.restore(step, args=ocp.args.Composite(
                    carried=ocp.args.JsonRestore()))
        except Exception as e:
            raise _unreadable("restore checkpoint", path, e, ". Delete that step directory to "
                              "fall back to the previous checkpoint.") from e
        return out["carried"]

    # ------------------------------------------------------------------ warm start
    def has_warmstart(self) -> bool:
        return os.path.isdir(self.warmstart_dir)

    def save_warmstart(self, params: Any) -> None:
        """Written under this run's own name, then renamed into place (see the module
        docstring); a warm start another job completed meanwhile is kept, ours dropped."""
        if distributed.is_writer() and os.path.exists(self._partial):
            shutil.rmtree(self._partial)  # left by an invocation that was killed mid-save
        distributed.barrier("warmstart_save")
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(self._partial, params)
        if distributed.is_writer():
            try:
                os.rename(self._partial, self.warmstart_dir)
            except OSError:  # another job's complete copy is there (ENOTEMPTY / EEXIST)
                if not os.path.isdir(self.warmstart_dir):
                    raise
                shutil.rmtree(self._partial, ignore_errors=True)
        distributed.barrier("warmstart_saved")

    def restore_warmstart(self, abstract_params: Any) -> Any:
        try:
            with _quiet_leftovers(), ocp.StandardCheckpointer() as ckptr:
                return ckptr.restore(self.warmstart_dir, abstract_params)
        except Exception as e:
            raise _unreadable("restore warm-start params", self.warmstart_dir, e) from e

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


def read_params(run_dir: str, step: Optional[int] = None) -> tuple[Any, int]:
    """(the train state's params as host arrays, step) from a run directory's checkpoint
    `step` (latest if None), without a mesh or a target structure: an RL run's
    {"policy": ..., ["value": ...]}, a reward-model run's {"trunk": ..., "head": ...}."""
    directory = os.path.join(os.path.abspath(run_dir), "checkpoints")
    steps = sorted(int(d) for d in os.listdir(directory) if d.isdigit()) if os.path.isdir(
        directory) else []
    if not steps:
        raise CheckpointError(f"no checkpoints in {directory}")
    if step is not None and step not in steps:
        shown = ", ".join(map(str, steps[-10:])) + (f" (and {len(steps) - 10} earlier)"
                                                    if len(steps) > 10 else "")
        raise CheckpointError(f"no checkpoint of step {step} in {directory}; its steps: {shown}")
    step = steps[-1] if step is None else step
    path = os.path.join(directory, str(step), "state")
    try:
        state = _restore_on_host(path)
    except Exception as e:
        raise _unreadable("read checkpoint", path, e) from e
    params = state["params"] if isinstance(state, dict) else state[1]
    return jax.tree.map(np.asarray, params), step


def read_policy_params(run_dir: str, step: Optional[int] = None) -> tuple[Any, int]:
    """(policy params as host arrays, step) of an RL run's checkpoint: for export and offline
    evaluation."""
    params, step = read_params(run_dir, step)
    if "policy" not in params:
        raise CheckpointError(f"{run_dir}: its checkpoints hold no policy (a reward-model run?)")
    return params["policy"], step


def _saved_list_length(path: str) -> int:
    """How many entries the list saved at `path` (a StandardSave item) holds, from its tree
    metadata; 0 when there is none."""
    try:
        with open(os.path.join(path, "_METADATA")) as f:
            tree = json.load(f)["tree_metadata"]
    except (OSError, ValueError, KeyError):
        return 0
    return len({v["key_metadata"][0]["key"] for v in tree.values()})


WARMSTART_POINTER = "warmstart_dir.txt"


def warmstart_path(run_dir: str) -> str:
    """Where a run's warm start is: its shared folder when it used one (recorded in the run
    directory), else RUN_DIR/warmstart."""
    pointer = os.path.join(run_dir, WARMSTART_POINTER)
    if os.path.exists(pointer):
        with open(pointer) as f:
            return f.read().strip()
    return os.path.join(os.path.abspath(run_dir), "warmstart")


def read_warmstart_params(run_dir: str) -> Any:
    """A run directory's warm-start params (host arrays), without a target structure."""
    path = warmstart_path(run_dir)
    try:
        return jax.tree.map(np.asarray, _restore_on_host(path))
    except Exception as e:
        raise _unreadable("read warm-start params", path, e) from e


def _restore_on_host(path: str) -> Any:
    """A saved tree onto this process's first device, whatever mesh (and however many
    processes) wrote it: the target is built from the checkpoint's own shapes and dtypes."""
    one = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    with _quiet_leftovers(), ocp.StandardCheckpointer() as ckptr:
        meta = ckptr.metadata(path)
        tree = getattr(meta, "item_metadata", meta)
        target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one),
                              tree)
        return ckptr.restore(path, target)
