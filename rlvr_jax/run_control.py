"""A run's hold on its directory and its answer to being stopped.

`RunLock`: one run per directory. An exclusive `flock` on RUN_DIR/.lock, held for the life of
the process: the kernel releases it when the process dies, however it dies, so a crashed run
never holds its directory forever. A second run on a locked directory stops at once with a
message naming the holder.

`StopSignals`: schedulers (SLURM, TPU preemption, Kubernetes) send SIGTERM before they kill.
The first SIGTERM or Ctrl-C (SIGINT) only sets a flag: the loop finishes the step in flight,
writes a checkpoint and returns; the rerun of the same command resumes from it. A second
Ctrl-C exits at once (code 130), for when the user really means it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import sys
import threading
import time
from typing import Optional


class RunLocked(RuntimeError):
    """Another live process holds the run directory; the message names it."""


class RunLock:
    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, ".lock")
        self._fd: Optional[int] = None

    def __enter__(self) -> "RunLock":
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunLocked(f"run directory {os.path.dirname(self.path)} is in use by {holder}; "
                            "wait for that run to finish, stop it, or choose another directory "
                            "(other overrides, or hydra.run.dir=...)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()} (since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')})\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class StopSignals:
    """Within the block, SIGTERM and the first SIGINT set `requested` (and say so once); a
    second SIGINT exits at once. Previous handlers come back on exit. Outside the main thread
    (signals cannot be caught there) it does nothing."""

    def __init__(self, say=lambda text: print(text, file=sys.stderr, flush=True)):
        self.requested: Optional[str] = None  # the signal's name, once one arrived
        self._say = say
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None and signum == signal.SIGINT:
            self._say(f"{name} again: exiting now, without a checkpoint")
            os._exit(130)
        if self.requested is None:
            self.requested = name
            self._say(f"{name}: finishing the current step, then writing a checkpoint and "
                      "exiting (Ctrl-C again to exit at once)")

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


class Stopped(Exception):
    """Raised where a stop request cannot wait for a checkpoint (the warm start)."""


class Watchdog:
    """Ends the process when `kick()` has not been called for `timeout_s` seconds: a process
    of a multi-process run that hangs (a deadlock, a stuck host call) keeps JAX's heartbeats
    going, so without this the others would wait in a collective forever. Once this process
    is gone, JAX's coordination service ends the others (distributed.py). timeout_s <= 0: off.
    `on_expire` is for tests; by default it says why in one line and exits with code 3."""

    def __init__(self, timeout_s: float, on_expire=None):
        self.timeout_s = timeout_s
        self._last = time.monotonic()
        self._done = threading.Event()
        self._on_expire = on_expire or self._exit
        self._thread: Optional[threading.Thread] = None

    def kick(self) -> None:
        self._last = time.monotonic()

    def _exit(self) -> None:
        print(f"error: no progress for {self.timeout_s:g} s (distributed.step_timeout_s): this "
              "process is stuck; exiting so that the run's other processes stop too. Rerun to "
              "resume from the last checkpoint.", file=sys.stderr, flush=True)
        os._exit(3)

    def _watch(self) -> None:
        while not self._done.wait(min(1.0, self.timeout_s / 4)):
            if time.monotonic() - self._last > self.timeout_s:
                self._on_expire()
                return

    def __enter__(self) -> "Watchdog":
        if self.timeout_s > 0:
            self._last = time.monotonic()
            self._thread = threading.Thread(target=self._watch, daemon=True, name="watchdog")
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
