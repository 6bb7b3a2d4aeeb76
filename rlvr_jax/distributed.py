"""One run over several processes: JAX's multi-controller runtime (`jax.distributed`).

Every process runs the same program on the same config: the same prompts, the same jitted
sampler and update over one mesh of all processes' devices (XLA's collectives: NCCL on GPUs,
ICI on TPUs, gloo on CPUs). What differs per process is host work: each verifies the rows of
the rollout that its own devices sampled (whole groups: the batch is split over processes in
contiguous blocks, and a group is G contiguous rows), in its own verifier pool, and the
verdicts are gathered so that every process holds the step's whole host state (rewards,
advantages, metrics) and computes it exactly as one process would. Only process 0 writes
files and logs (`is_writer`); orbax checkpoints are written by every process (its shards).

A process that dies or hangs ends the others: JAX's coordination service misses its
heartbeats for `distributed.heartbeat_timeout_s` seconds and terminates them with an error.

No JAX device is touched here before `initialize`, which must run before anything else does.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import jax
import numpy as np

from rlvr_jax.config import ConfigError
from rlvr_jax.types import Status, Verdict

# Environment variables that say a launcher started this process as one of several.
_CLUSTER_ENV = (("SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"), ("OMPI_COMM_WORLD_SIZE",),
                ("MEGASCALE_NUM_SLICES",))


def _launched_as_many() -> bool:
    for names in _CLUSTER_ENV:
        for name in names:
            value = os.environ.get(name, "")
            if value.isdigit() and int(value) > 1:
                return True
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")  # a TPU VM slice of several workers
    return "," in hosts


def initialize(coordinator_address: str, num_processes: int, process_id: int,
               heartbeat_timeout_s: int, init_timeout_s: int) -> None:
    """Join the run's processes, when it has several: the config's explicit values
    (`distributed.num_processes` > 1), else what SLURM / Open MPI / a TPU slice say (JAX
    detects the coordinator and ranks; `num_processes` -1 forces the detection). One process:
    nothing to do."""
    if jax.distributed.is_initialized():
        return
    explicit = num_processes > 1
    if not explicit and num_processes != -1 and not _launched_as_many():
        return
    # CPU processes need a collectives backend (GPUs/TPUs bring NCCL/ICI); set before start.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs: dict[str, Any] = dict(heartbeat_timeout_seconds=heartbeat_timeout_s,
                                  initialization_timeout=init_timeout_s)
    if explicit:
        if not coordinator_address or process_id < 0:
            raise ConfigError("config keys 'distributed.coordinator_address' and "
                              "'distributed.process_id' must be set with "
                              "distributed.num_processes > 1")
        kwargs.update(coordinator_address=coordinator_address, num_processes=num_processes,
                      process_id=process_id)
    jax.distributed.initialize(**kwargs)


def is_writer() -> bool:
    """The one process that writes files, metrics and console lines."""
    return jax.process_index() == 0


def to_host(tree: Any) -> Any:
    """Device arrays -> numpy, each whole on every process (gathered when they are spread
    over several)."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)


def gather_rows(local: np.ndarray) -> np.ndarray:
    """This process's block of a host array's rows -> every process's blocks, in process
    order (the whole array, on every process)."""
    if jax.process_count() == 1:
        return local
    from jax.experimental import multihost_utils

    return np.array(multihost_utils.process_allgather(local, tiled=True))  # a writable copy


def my_rows(n: int) -> slice:
    """This process's block of a batch of `n` rows: the rows its devices hold under the
    batch sharding (contiguous blocks, in process order)."""
    h, count = jax.process_index(), jax.process_count()
    if n % count:
        raise ValueError(f"a batch of {n} rows does not split over {count} processes")
    return slice(h * n // count, (h + 1) * n // count)


def gather_texts(local: Sequence[str]) -> list[str]:
    """This process's block of a batch's texts -> every process's blocks, in process order
    (each process holds as many)."""
    if jax.process_count() == 1:
        return list(local)
    from jax.experimental import multihost_utils

    data = [t.encode() for t in local]
    len_n = np.array(multihost_utils.process_allgather(
        np.array([len(d) for d in data], np.int32), tiled=True))
    buf = np.zeros((len(data), max(int(len_n.max(initial=0)), 1)), np.uint8)
    for i, d in enumerate(data):
        buf[i, :len(d)] = np.frombuffer(d, np.uint8)
    every = np.array(multihost_utils.process_allgather(buf, tiled=True))
    return [bytes(every[i, :n]).decode() for i, n in enumerate(len_n)]


def owners(n: int) -> np.ndarray:
    """The process that owns each of a batch's `n` rows (my_rows' blocks): it opens, steps,
    finishes and closes their episodes, whichever decode row they stream through."""
    count = jax.process_count()
    my_rows(n)  # the same refusal when they do not split
    return np.repeat(np.arange(count, dtype=np.int32), n // count)


def from_owners(owner_n: np.ndarray, *arrays: np.ndarray) -> tuple:
    """Each row of `arrays` (leading dim n, the same shapes on every process) as its owner
    process (`owner_n`) filled it, on every process: what one process learned from the
    environment about its own episodes, for the decisions every process makes alike."""
    if jax.process_count() == 1:
        return arrays
    from jax.experimental import multihost_utils

    stacked = multihost_utils.process_allgather(arrays, tiled=False)  # each [P, n, ...]
    rows = np.arange(len(owner_n))
    return tuple(np.array(x[np.asarray(owner_n), rows]) for x in stacked)


def gather_verdicts(local: Sequence[Verdict]) -> tuple[list[Verdict], list[int]]:
    """Every process's verdicts of its rows, in row order, on every process (status and
    fraction: what rewards are computed from; other processes' details are left empty), and
    how many each process verified."""
    if jax.process_count() == 1:
        return list(local), [len(local)]
    from jax.experimental import multihost_utils

    status = np.array([int(v.status) for v in local], np.int32)
    fraction = np.array([v.fraction for v in local], np.float32)
    all_status, all_fraction = multihost_utils.process_allgather((status, fraction), tiled=True)
    counts = multihost_utils.process_allgather(np.array([len(local)], np.int32), tiled=True)
    mine = my_rows(len(all_status))
    out = [Verdict(Status(int(s)), "", 0.0, float(f)) for s, f in zip(all_status, all_fraction)]
    out[mine] = list(local)
    return out, [int(c) for c in counts]


def any_process(flag: bool) -> bool:
    """True on every process when it is True on any (a stop request reaching one of them)."""
    if jax.process_count() == 1:
        return flag
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.array([flag]))))


def barrier(name: str) -> None:
    """Every process waits here until all have arrived (one process: returns at once)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def publish(path: str, text: str) -> None:
    """The writer's file that other processes may be reading at that moment (run_config.json
    at a resume, processes.txt): written under a temporary name and renamed, so a reader sees
    the old file or the new one, never a truncated one (a half-written run_config.json made
    process 1 fail its config check and leave process 0 alone in the next collective)."""
    if not is_writer():
        return
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def check_process_count(run_dir: str) -> None:
    """A run resumes only with the process count it started with (its checkpoints' shards and
    the split of the rollouts follow it); the first start records it."""
    path = os.path.join(run_dir, "processes.txt")
    count = jax.process_count()
    if os.path.exists(path):
        with open(path) as f:
            before = int(f.read().strip() or count)
        if before != count:
            from rlvr_jax.checkpoint import CheckpointError

            raise CheckpointError(f"{run_dir} was started with {before} processes and this run "
                                  f"has {count}: resume it with {before} (or start a new run "
                                  "directory)")
    else:
        publish(path, f"{count}\n")
