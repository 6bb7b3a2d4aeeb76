"""A cgroup per sandbox: its whole process tree bounded in memory and pids, with a CPU share
of its own, where the host allows it (root with cgroup v1 memory + pids, or v2); else
per-process rlimits only (bwrap.py's threat model)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from rlvr_jax.sandbox.privilege import NOBODY, drop_privileges, of_dead_processes


class Cgroup:
    """Best effort: a cgroup bounding memory and pids of one sandbox's whole tree, with a CPU
    share of its own where the cpu controller is there.

    The sandbox must be inside it before bwrap forks anything: the unprivileged launcher
    shell writes its own pid into the cgroup, then execs bwrap (see `spawn`), so every process
    of the sandbox inherits it. The cgroup's procs files are handed to that uid for this; a
    probe checks that joining works, else the kind says "none" and only rlimits apply.

    The CPU share: the scheduler divides the CPU between cgroups first, so a sandbox whose
    candidate runs 30 processes (each in a session of its own, which would otherwise give each
    its own scheduling autogroup) gets one sandbox's share, never starving an honest job in
    another sandbox into a timeout. `oom_kills()` counts the kernel's OOM kills inside it: the
    pool reads it to report the candidate's memory limit even when the worker was the one
    killed."""

    NONE = "none (per-process rlimits only)"
    CPU_SHARES = 1024  # v1 cpu.shares of every sandbox (the default weight, equal for all)

    def __init__(self, name: str, memory_bytes: int, pids: int):
        self.paths: list[str] = []
        self.kind = self.NONE
        self._events = None  # the file with the oom_kill count
        self._events_fd = None
        if os.geteuid() != 0:
            return
        try:
            if os.path.isdir("/sys/fs/cgroup/memory") and os.path.isdir("/sys/fs/cgroup/pids"):
                for ctrl, knob, value in (("memory", "memory.limit_in_bytes", memory_bytes),
                                          ("pids", "pids.max", pids)):
                    self._make(f"/sys/fs/cgroup/{ctrl}/rlvr_{name}", {knob: value})
                self._events = f"/sys/fs/cgroup/memory/rlvr_{name}/memory.oom_control"
                kind = "cgroup v1 (memory, pids"
                if os.path.isdir("/sys/fs/cgroup/cpu"):
                    try:
                        self._make(f"/sys/fs/cgroup/cpu/rlvr_{name}",
                                   {"cpu.shares": self.CPU_SHARES})
                        kind += ", cpu"
                    except OSError:
                        pass  # memory and pids still bound the tree
                kind += ")"
            elif os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
                path = f"/sys/fs/cgroup/rlvr_{name}"
                self._make(path, {"memory.max": memory_bytes, "pids.max": pids})
                self._events = f"{path}/memory.events"
                kind = ("cgroup v2 (memory, pids, cpu)" if os.path.exists(f"{path}/cpu.weight")
                        else "cgroup v2 (memory, pids)")
            else:
                return
            if kind not in Cgroup._JOINS:  # probed once per kind and process (a fork each)
                probe = subprocess.run(["/bin/sh", "-c", self.join_script() + "exit 0"],
                                       capture_output=True, timeout=10, **drop_privileges())
                if probe.returncode != 0:
                    raise OSError(probe.stderr.decode()[:200])
                Cgroup._JOINS.add(kind)
            self.kind = kind
        except (OSError, subprocess.SubprocessError):
            self.remove()
            self.kind = self.NONE
            self._events = None

    _STALE_CHECKED = False
    _JOINS: set = set()  # kinds whose cgroups the unprivileged launcher was seen to join

    @classmethod
    def remove_stale(cls, min_age_s: float = 30.0) -> list[str]:
        """Remove the cgroups a killed trainer left (ours are named rlvr_<pid>_...): those
        whose process is gone from this pid namespace, that hold no process (a sandbox dies
        with its parent) and are older than `min_age_s`. Once per process; the paths removed.
        A cgroup with processes is left alone: they may belong to another pid namespace."""
        if cls._STALE_CHECKED or os.geteuid() != 0:
            return []
        cls._STALE_CHECKED = True
        removed = []
        now = time.time()
        for parent in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu",
                       "/sys/fs/cgroup"):
            for path in of_dead_processes(parent, "rlvr_", "_"):
                try:
                    if now - os.stat(path).st_mtime > min_age_s and not members(path):
                        os.rmdir(path)
                        removed.append(path)
                except OSError:
                    pass
        return removed

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this cgroup (0 when the
        kernel does not count them or there is no cgroup)."""
        if self._events is None:
            return 0
        try:
            if self._events_fd is None:  # kept open: read once per job, open() cost 50 us
                self._events_fd = os.open(self._events, os.O_RDONLY | os.O_CLOEXEC)
            for line in os.pread(self._events_fd, 4096, 0).split(b"\n"):
                if line.startswith(b"oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def _make(self, path: str, knobs: dict) -> None:
        os.makedirs(path, exist_ok=True)
        self.paths.append(path)
        for knob, value in knobs.items():
            with open(os.path.join(path, knob), "w") as f:
                f.write(str(value))
        os.chown(os.path.join(path, "cgroup.procs"), NOBODY, NOBODY)

    def join_script(self) -> str:
        """Shell lines that move the running shell into every controller's cgroup."""
        return "".join(f'echo $$ > "{p}/cgroup.procs" && ' for p in self.paths)

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (an orphan of a half-started bwrap included)."""
        for path in self.paths:
            if os.path.exists(os.path.join(path, "cgroup.kill")):  # v2: the kernel does it
                try:
                    with open(os.path.join(path, "cgroup.kill"), "w") as f:
                        f.write("1")
                    continue
                except OSError:
                    pass
            for pid in members(path):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def remove(self, timeout_s: float = 3.0) -> bool:
        """Kill what is left in it, wait until it is empty, delete it; False if it stays (the
        caller retries at close)."""
        if getattr(self, "_events_fd", None) is not None:
            os.close(self._events_fd)
            self._events_fd = None
        self.kill()
        deadline = time.monotonic() + timeout_s
        left = []
        for path in self.paths:
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: processes are still exiting
                    if time.monotonic() > deadline:
                        left.append(path)
                        break
                    self.kill()
                    time.sleep(0.01)
        self.paths = left
        return not left


def members(cgroup_path: str) -> list[int]:
    try:
        with open(os.path.join(cgroup_path, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []
