"""Bubblewrap sandbox for untrusted model output (bwrap via subprocess; no sandbox package).

Threat model. The candidate program is hostile: it may loop, fork-bomb, allocate, print
without end, fill /tmp, try the network, read secrets, write the system, leave daemons, signal
or ptrace its supervisor, or escalate privileges. The sandbox isolates:
  * identity: bwrap is launched by an unprivileged uid (65534 when the trainer runs as root,
    since a root-launched bwrap maps to host root) in a new user namespace with every
    capability dropped and nested user namespaces disabled (`--disable-userns`); setuid fails;
  * filesystem: only /usr (read-only; /bin, /lib, /lib64 are symlinks into it on merged-/usr
    systems), the loader cache and the one worker script are visible (the script is handed to
    bwrap through a file descriptor, so it works wherever the package is installed, a private
    0700 checkout included); the root is read-only (no /var/tmp, no new top-level paths); no
    /etc/shadow, no home, no project files, no answer files; /proc is the sandbox's own (new
    pid namespace); /dev the minimal set, read-only. The only writable mounts are /tmp and
    /dev/shm, each a size-capped tmpfs emptied after every job (whatever modes the candidate
    set) with its root reset (mode 1777, no extended attributes) and probed (a file made,
    written, read, removed) before the next job, else the worker is replaced;
  * what would outlive a job elsewhere, denied by a seccomp filter (`_DENIED`): System V IPC
    (memory in no process), setting or removing extended attributes (a default ACL on /tmp
    made every later job's files read-only), the kernel's keyrings (keys outlive the sandbox
    and share one quota); POSIX queues: RLIMIT_MSGQUEUE 0;
  * environment: `--clearenv` (the trainer's variables, tokens and PYTHON* never enter);
  * network: a new network namespace (no interface but a down loopback);
  * processes: pid namespace with our worker as pid 1 (`--as-pid-1`): after each job it kills
    every other process in the namespace; every signal handler of the worker is SIG_DFL, so
    the kernel drops what the namespace's processes send it; `--die-with-parent`,
    `--new-session` (no TIOCSTI); the worker and its children are non-dumpable (no ptrace, no
    /proc/pid/mem). On the host, bwrap runs in a process group of its own, killed whole with
    its cgroup when the worker is replaced or the pool closes;
  * the verdict channel: a job's child holds only its own three pipes (none of the worker's
    descriptors, so it cannot write reply lines to the host), and what it reports is checked
    by the worker: a malformed result (any type, any nesting past 100 levels), or a claim of
    an infrastructure failure from a Python candidate (which would mask the sample out of the
    loss instead of scoring it), is a runtime error; a result over 1 MiB is an output limit.
    Every reply carries its job's id and the host matches by id. The host compares outputs with
    expected values, which never enter; a dataset's own test (which holds them) runs as the
    job's second phase, in a child forked only after every process of the candidate is dead;
  * resources per job: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_NOFILE,
    core 0, a wall deadline and a stdout/stderr cap enforced by the worker, and the host pool's
    own deadline that kills the whole sandbox. Where the host allows it (root with a writable
    cgroup v1 memory+pids hierarchy or cgroup v2), each sandbox's whole process tree is also
    bounded in memory and pids; otherwise (stated in `Sandbox.cgroup`) the bound is per process
    (RLIMIT_AS) times the process limit (RLIMIT_NPROC).
Not isolated: the kernel itself (the seccomp filter denies only the calls above: a kernel
exploit escapes), CPU time stolen from the trainer within the limits, timing side channels,
and the system interpreter and libraries under /usr, which the candidate can read.

Graders that need the trainer's libraries (`TrainerPython`: reasoning-gym's scorers, some of
which eval the answer) run the same way with one difference: the trainer's interpreter binary,
libpython and standard library are bound read-only at their own paths, its site directories
at /opt/rlvr/site/<k> in its own order (readable by the candidate, like /usr; never the
interpreter's whole prefix), and the worker imports the grader's modules once before it forks
each job's child. When the trainer runs as root, those paths may sit under a home only root
can enter: a private mount namespace (made by root, discarded with the worker) bind-mounts
them onto empty directories or files the unprivileged uid can reach (`MOUNT_POINTS`, removed
when the last pool using them closes; a killed trainer's, at the next start), and only then
does bwrap start as that uid. (The scorer's process itself never evaluates an answer:
isolated_eval.py.)
"""

from __future__ import annotations

import atexit
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Optional, Sequence

WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "box_worker.py")
# A session's pid 1 (session.py), which uses the worker script's helpers beside it.
SESSION_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "session_server.py")
PYTHON = "/usr/bin/python3"  # the system interpreter: root-only paths (pyenv in /root) are not
NOBODY = 65534               # readable by the sandbox's unprivileged uid
SHM_MB = 64  # the /dev/shm tmpfs's cap


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create namespaces here; the message says how to fix it."""


def worker_fd(script: str = WORKER_SCRIPT) -> int:
    """A memory file holding a script, for `--ro-bind-data`: bwrap copies it into the
    sandbox, so the sandbox's unprivileged uid never needs to read the install path."""
    fd = os.memfd_create("rlvr-sandbox-worker", 0)
    with open(script, "rb") as f:
        os.write(fd, f.read())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# Calls a seccomp filter denies (EPERM), per architecture, with the audit arch that
# seccomp_data reports; a call from another ABI (i386's int 0x80 on x86_64, x32) is killed,
# since its numbers differ. Three families, each a way for one job to leave something behind
# that the wipe of /tmp and /dev/shm does not reach:
#  * System V IPC: a shared memory segment (a message queue, a semaphore set) outlives the
#    processes that made it, so its memory sits in no process: the OOM killer then takes the
#    worker instead of the candidate, and without a cgroup nothing bounds it (RLIMIT_AS counts
#    only what a process maps). Python's multiprocessing uses POSIX semaphores in /dev/shm.
#  * extended attributes, set and removed (setxattr, lsetxattr, fsetxattr, removexattr, ...,
#    and the *xattrat calls of Linux 6.13): a default ACL (`system.posix_acl_default`) or a
#    `user.*` attribute on /tmp's root survives the wipe, which empties the directory: with a
#    read-only default ACL every file later jobs create there is read-only (our own harness's
#    included), and the attribute is a channel from one job to the next. Reading stays allowed.
#  * the kernel's keyrings (add_key, request_key, keyctl): a key in the user keyring survives
#    the job, the tool call, the episode and the sandbox itself (the keyring belongs to the
#    host uid every sandbox runs as), and the key quota is shared by all of them.
# No candidate needs any of them (shutil's copies ignore EPERM on xattrs).
_DENIED = {
    "x86_64": (0xC000003E, (29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220,  # System V IPC
                            188, 189, 190, 197, 198, 199, 463, 466,  # set/remove xattrs
                            248, 249, 250)),  # add_key, request_key, keyctl
    "aarch64": (0xC00000B7, (*range(186, 198),  # System V IPC
                             5, 6, 7, 14, 15, 16, 463, 466,  # set/remove xattrs
                             217, 218, 219)),  # add_key, request_key, keyctl
}
_X32_BIT = 0x40000000


def seccomp_filter() -> Optional[bytes]:
    """A classic BPF program for bwrap's `--seccomp FD` (struct sock_filter[]): EPERM for the
    calls in `_DENIED`, kill for a foreign ABI, allow the rest; None on an architecture not
    listed (then the worker still removes IPC objects and the roots' attributes after each
    job)."""
    arch = _DENIED.get(platform.machine())
    if arch is None:
        return None
    audit_arch, calls = arch
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    n = len(calls)
    # Layout: 0 load arch; 1 arch check; 2 load nr; 3 x32 check; 4..4+n-1 one per call;
    # then allow, eperm, kill.
    eperm_at, kill_at = 5 + n, 6 + n  # allow sits at 4 + n
    prog = [(ld, 0, 0, 4), (jeq, 0, kill_at - 2, audit_arch), (ld, 0, 0, 0),
            (jge, kill_at - 4, 0, _X32_BIT) if audit_arch == 0xC000003E else (jeq, 0, 0, 0)]
    for k, nr in enumerate(calls):
        prog.append((jeq, eperm_at - (4 + k) - 1, 0, nr))
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm), (ret, 0, 0, kill)]
    assert len(prog) == kill_at + 1
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def seccomp_fd() -> Optional[int]:
    """A memory file holding `seccomp_filter()`, for bwrap's `--seccomp`; None if none."""
    prog = seccomp_filter()
    if prog is None:
        return None
    fd = os.memfd_create("rlvr-sandbox-seccomp", 0)
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


SITE_ROOT = "/opt/rlvr/site"  # where the trainer's site directories appear in the sandbox
_HIDDEN = ("/tmp", "/dev", "/proc")  # the sandbox's own mounts: nothing of the host's shows


@dataclass(frozen=True)
class TrainerPython:
    """The trainer's interpreter inside the sandbox, read-only, with modules the worker
    imports before its first job (`preload`).

    Only what the interpreter needs is bound, never its whole prefix: the interpreter binary,
    its shared libpython, its standard library (lib-dynload included), at their own paths; and
    the trainer's site directories, in the trainer's own `sys.path` order, at
    /opt/rlvr/site/<k>, which the worker adds itself (`--path`, with `site.addsitedir`, so
    .pth files work) after starting the interpreter with `-I -S`: no other install's
    site-packages can shadow the trainer's (a venv under /tmp, hidden by the sandbox's own
    /tmp, once made the worker import another reasoning-gym). A preloaded package living
    outside those directories (an editable install) is bound too. An interpreter or standard
    library under /tmp, /dev or /proc cannot be shown at its own path: refused, with the
    reason (`binds`)."""

    preload: tuple[str, ...] = ()

    @staticmethod
    def executable() -> str:
        return os.path.realpath(sys.executable)

    @staticmethod
    def site_dirs() -> list[str]:
        """The trainer's site directories, in its `sys.path` order, without repeats."""
        out: list[str] = []
        for p in sys.path:
            if p and os.path.basename(p) in ("site-packages", "dist-packages") \
                    and os.path.isdir(p) and os.path.realpath(p) not in out:
                out.append(os.path.realpath(p))
        return out

    def binds(self) -> list[tuple[str, str]]:
        """(host path, sandbox path) pairs, read-only; SandboxUnavailable, naming the path,
        when the interpreter itself sits where the sandbox has its own mounts."""
        import _struct
        import importlib.util
        import sysconfig

        own = [self.executable()]
        if sysconfig.get_config_var("Py_ENABLE_SHARED"):
            lib = os.path.join(str(sysconfig.get_config_var("LIBDIR") or ""),
                               str(sysconfig.get_config_var("INSTSONAME") or ""))
            if os.path.isfile(lib):
                own.append(os.path.realpath(lib))
        # The standard library and its extension modules, from where this interpreter loaded
        # them (in a venv, sysconfig's platstdlib names the venv, not the base).
        stdlib = os.path.dirname(os.path.realpath(os.__file__))
        own.append(stdlib)
        dynload = os.path.dirname(os.path.realpath(getattr(_struct, "__file__", "") or stdlib))
        if not (dynload == stdlib or dynload.startswith(stdlib + os.sep)):
            own.append(dynload)
        for path in own:
            for hidden in _HIDDEN:
                if path == hidden or path.startswith(hidden + os.sep):
                    raise SandboxUnavailable(
                        f"the trainer's Python ({path}) lies under {hidden}, which the "
                        "sandbox replaces with its own mount, so a grader that needs "
                        "the trainer's libraries cannot run it: use an interpreter installed "
                        "elsewhere (a venv under /tmp is fine; its base interpreter is not)")
        sites = self.site_dirs()
        binds = [(p, p) for p in own]
        binds += [(p, f"{SITE_ROOT}/{k}") for k, p in enumerate(sites)]
        for k, name in enumerate(self.preload):
            spec = importlib.util.find_spec(name)
            where = (list(spec.submodule_search_locations or []) if spec else [])
            for path in map(os.path.realpath, where):
                if not any(path.startswith(d + os.sep) for d in sites):
                    binds.append((path, f"/opt/rlvr/pkg/{k}/{os.path.basename(path)}"))
        return binds

    def site_paths(self) -> list[str]:
        """The sandbox's paths the worker adds, in order: the site directories, then the
        folders holding preloaded packages bound on their own."""
        paths = [dest for _, dest in self.binds()
                 if dest.startswith(SITE_ROOT + "/") or dest.startswith("/opt/rlvr/pkg/")]
        return [p if p.startswith(SITE_ROOT) else os.path.dirname(p) for p in paths]


def bwrap_argv(once: bool, script_fd: int, tmp_mb: int = 64,
               seccomp: Optional[int] = None, python: Optional[TrainerPython] = None,
               binds: Sequence[tuple[str, str]] = (), session_fd: Optional[int] = None,
               tmpfs: Sequence[str] = ()) -> list[str]:
    """`binds`: (source on the host, path in the sandbox) pairs, read-only (the trainer's
    Python when `python` is set). `session_fd`: run a session's server (session.py) instead
    of the one-shot worker, with the system interpreter. `tmpfs`: more writable top-level
    directories (e.g. /app, a Harbor task's workspace), each a tmpfs capped as /tmp is."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--new-session", "--as-pid-1", "--clearenv", "--cap-drop", "ALL",
            "--ro-bind", "/usr", "/usr"]
    for source, dest in binds:
        argv += ["--ro-bind", source, dest]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = os.path.join("/", link)
        if os.path.islink(target):
            argv += ["--symlink", os.readlink(target), target]
        elif os.path.isdir(target):
            argv += ["--ro-bind", target, target]
    if os.path.exists("/etc/ld.so.cache"):
        argv += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    argv += ["--ro-bind-data", str(script_fd), "/opt/rlvr/worker.py"]
    if session_fd is not None:
        argv += ["--ro-bind-data", str(session_fd), "/opt/rlvr/session.py"]
    argv += ["--proc", "/proc", "--dev", "/dev",
             # /dev/shm: its own capped tmpfs; /dev itself read-only (its tmpfs had no cap).
             "--size", str(SHM_MB << 20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
             "--size", str(tmp_mb << 20), "--tmpfs", "/tmp",
             *[arg for path in tmpfs for arg in ("--size", str(tmp_mb << 20), "--tmpfs", path)],
             # bwrap's root is a tmpfs the sandbox could write (e.g. create /var/tmp): make
             # everything but /tmp read-only.
             "--remount-ro", "/",
             "--setenv", "PATH", "/usr/bin", "--setenv", "HOME", "/tmp",
             "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--chdir", "/tmp",
             "--hostname", "sandbox"]
    if seccomp is not None:
        argv += ["--seccomp", str(seccomp)]
    if session_fd is not None:
        return argv + ["--", PYTHON, "-I", "-S", "/opt/rlvr/session.py"]
    if python is None:
        argv += ["--", PYTHON, "-I", "-S", "/opt/rlvr/worker.py"]
    else:  # the trainer's site directories, added by the worker in the trainer's order
        argv += ["--", python.executable(), "-I", "-S", "/opt/rlvr/worker.py",
                 "--path=" + os.pathsep.join(python.site_paths())]
        if python.preload:
            argv.append("--preload=" + ",".join(python.preload))
    return argv + (["--once"] if once else [])


class _MountPoints:
    """Empty directories (or files) on the host, one per path the trainer's Python binds,
    which root's private mount namespace binds those paths onto before dropping to the
    sandbox's uid (see the module docstring). One folder per process under the temp dir,
    `rlvr-bind-<pid>-*`, held by the pools that use it (`hold` / `release`) and removed when
    the last lets go, at exit, or, for a process that was killed, by the next one to start."""

    def __init__(self):
        self.folder: Optional[str] = None
        self.points: dict[str, str] = {}
        self.holders = 0

    def get(self, path: str) -> str:
        if self.folder is None:
            _remove_stale_mount_points()
            self.folder = tempfile.mkdtemp(prefix=f"rlvr-bind-{os.getpid()}-")
            os.chmod(self.folder, 0o755)
        if path not in self.points:
            point = os.path.join(self.folder, str(len(self.points)))
            if os.path.isdir(path):
                os.mkdir(point, 0o755)
            else:
                open(point, "w").close()
                os.chmod(point, 0o644)
            self.points[path] = point
        return self.points[path]

    def hold(self) -> None:
        self.holders += 1

    def release(self) -> None:
        self.holders = max(self.holders - 1, 0)
        if self.holders == 0:
            self.remove()

    def remove(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder, self.points = None, {}


def _remove_stale_mount_points() -> None:
    """Remove the mount-point folders of processes that are gone (a killed trainer's)."""
    for path in _of_dead_processes(tempfile.gettempdir(), "rlvr-bind-", "-"):
        shutil.rmtree(path, ignore_errors=True)


def _of_dead_processes(folder: str, prefix: str, sep: str) -> list[str]:
    """The entries of `folder` named `<prefix><pid><sep>...` whose process is gone from this
    pid namespace (ours are named so: mount-point folders, cgroups)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for name in names:
        pid = name[len(prefix):].split(sep)[0] if name.startswith(prefix) else ""
        if pid.isdigit() and sep in name[len(prefix):] and not _alive(int(pid)):
            out.append(os.path.join(folder, name))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


MOUNT_POINTS = _MountPoints()
atexit.register(MOUNT_POINTS.remove)


def _launch(argv: list[str], python: Optional[TrainerPython],
            cgroup: Optional["Cgroup"]) -> tuple[list[str], dict]:
    """(argv, Popen arguments) that start bwrap as the unprivileged uid inside `cgroup`:
    directly, or, for the trainer's Python as root, after a private mount namespace has made
    its directories reachable (see the module docstring)."""
    join = cgroup.join_script() if cgroup is not None and cgroup.paths else ""
    drop = f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups --"
    if python is None and os.geteuid() == 0 and shutil.which("setpriv"):
        # Root drops to the sandbox's uid in the launched process (setpriv), not in Popen:
        # a Popen that changes uid forks the whole trainer (no vfork), ~20 ms and more as
        # its memory grows; this way a sandbox starts in a few milliseconds.
        if join:
            return ["/bin/sh", "-c", join + f'exec {drop} "$@"', "sh", *argv], {}
        return [*drop.split(), *argv], {}
    if python is None or os.geteuid() != 0:
        if join:
            argv = ["/bin/sh", "-c", join + 'exec "$@"', "sh", *argv]
        return argv, _drop_privileges()
    mounts = "".join(f'mount --bind "{source}" "{MOUNT_POINTS.get(source)}" && '
                     for source, _ in python.binds())
    return (["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
             mounts + join + f'exec {drop} "$@"', "sh", *argv], {})


def _binds(python: Optional[TrainerPython]) -> list[tuple[str, str]]:
    if python is None:
        return []
    if os.geteuid() != 0:
        return python.binds()
    return [(MOUNT_POINTS.get(source), dest) for source, dest in python.binds()]


def _drop_privileges() -> dict:
    """Popen arguments that start bwrap as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def check_available() -> None:
    """Raise SandboxUnavailable, naming what is missing and how to fix it, unless a sandboxed
    Python runs the worker script here."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: install it, e.g. "
                                 "`apt-get install -y bubblewrap` (Debian/Ubuntu) or `dnf "
                                 "install bubblewrap`; there is no unsandboxed fallback")
    if not os.path.exists(PYTHON):
        raise SandboxUnavailable(f"{PYTHON} not found: the sandbox runs the system Python 3")
    fd, filt = worker_fd(), seccomp_fd()
    fds = (fd,) if filt is None else (fd, filt)
    try:
        argv = bwrap_argv(once=True, script_fd=fd, seccomp=filt)
        probe = subprocess.run(argv[: argv.index("--")] + ["--", PYTHON, "-I", "-S", "-c",
                                                           "import json, resource"],
                               capture_output=True, text=True, timeout=20, pass_fds=fds,
                               **_drop_privileges())
    except subprocess.TimeoutExpired:
        raise SandboxUnavailable("bwrap did not start within 20 s") from None
    finally:
        for f in fds:
            os.close(f)
    if probe.returncode != 0:
        err = probe.stderr.strip()
        if any(s in err for s in ("namespace", "uid map", "setting up uid", "Operation not "
                                                                            "permitted")):
            raise SandboxUnavailable(
                f"bwrap cannot create its namespaces here ({err}). Enable unprivileged user "
                "namespaces (sysctl kernel.unprivileged_userns_clone=1, or "
                "user.max_user_namespaces > 0; in Docker, run with a seccomp profile that "
                "allows clone(CLONE_NEWUSER)).")
        raise SandboxUnavailable(f"bwrap could not start the sandbox: {err or 'no message'} "
                                 f"(exit code {probe.returncode}; {PYTHON} inside it)")


def containment() -> str:
    """What a sandbox of this host gets, as the pools and sessions will make it: bubblewrap
    (namespaces, no network, seccomp where the kernel has it) and the bound on its whole
    process tree (a cgroup's kind and controllers, or per-process rlimits only); or why
    there is no sandbox. Probed once (a bwrap start and a cgroup made and removed)."""
    try:
        check_available()
    except SandboxUnavailable as e:
        return f"unavailable: {e}"
    probe = Cgroup(f"{os.getpid()}_containment", 64 << 20, 16)
    try:
        filt = seccomp_fd()
        if filt is not None:
            os.close(filt)
        return (f"bubblewrap (no network, {'seccomp' if filt is not None else 'no seccomp'}), "
                f"{probe.kind}")
    finally:
        probe.remove()


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
                                       capture_output=True, timeout=10, **_drop_privileges())
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
            for path in _of_dead_processes(parent, "rlvr_", "_"):
                try:
                    if now - os.stat(path).st_mtime > min_age_s and not _pids(path):
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
            for pid in _pids(path):
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


def _pids(cgroup_path: str) -> list[int]:
    try:
        with open(os.path.join(cgroup_path, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def spawn(once: bool, cgroup: Optional[Cgroup] = None, tmp_mb: int = 64,
          python: Optional[TrainerPython] = None, session: bool = False,
          tmpfs: Sequence[str] = ()) -> subprocess.Popen:
    """Start a sandboxed worker; its stdin/stdout speak the JSON-lines protocol. With a
    working cgroup, a shell joins it and execs bwrap, so nothing runs outside it. bwrap starts
    a session (and process group) of its own: `kill` takes the whole group, so a bwrap child
    still setting up (before its die-with-parent is armed) cannot outlive it. `python`: run
    the worker with the trainer's interpreter (a grader's libraries), else the system one.
    `session`: a session's server (session.py), with the system interpreter."""
    fd, filt = worker_fd(), seccomp_fd()
    sfd = worker_fd(SESSION_SCRIPT) if session else None
    fds = tuple(f for f in (fd, filt, sfd) if f is not None)
    argv, drop = _launch(bwrap_argv(once, fd, tmp_mb, seccomp=filt, python=python,
                                    binds=_binds(python), session_fd=sfd, tmpfs=tmpfs),
                         python, cgroup)
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, bufsize=0, pass_fds=fds,
                                start_new_session=True, **drop)
    finally:
        for f in fds:
            os.close(f)  # bwrap holds its own copies until it has read them


def signal_group(proc: subprocess.Popen) -> None:
    """SIGKILL a worker's whole process group (not reaped: `kill` does)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL a worker's whole process group, then reap its leader."""
    signal_group(proc)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
