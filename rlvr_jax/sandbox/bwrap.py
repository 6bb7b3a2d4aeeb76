"""Bubblewrap sandbox for untrusted model output (bwrap via subprocess; no sandbox package).

Threat model. The candidate program is hostile: it may loop, fork-bomb, allocate, print
without end, fill /tmp, try the network, read secrets, write the system, leave daemons, signal
or ptrace its supervisor, or escalate privileges. The sandbox isolates:
  * identity: bwrap is launched by an unprivileged uid (65534 when the trainer runs as root,
    since a root-launched bwrap maps to host root) in a new user namespace with every
    capability dropped and nested user namespaces disabled (`--disable-userns`); setuid fails;
  * filesystem: only /usr (read-only; /bin, /lib, /lib64 are symlinks into it on merged-/usr
    systems), the loader cache and the worker's scripts are visible (worker.py and the value
    encoding it imports, typed_json.py; each handed to bwrap through a file descriptor, so they
    work wherever the package is installed, a private 0700 checkout included); the root is
    read-only (no /var/tmp, no new top-level paths); no /etc/shadow, no home, no project files, no
    answer files; /proc is the sandbox's own (new pid namespace); /dev the minimal set, read-only.
    The only writable mounts are /tmp and /dev/shm, each a size-capped tmpfs emptied after every
    job (whatever modes the candidate set) with its root reset (mode 1777, no extended attributes)
    and probed (a file made, written, read, removed) before the next job, else the worker is
    replaced;
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

import os
import platform
import shutil
import signal
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Sequence

from rlvr_jax.sandbox.cgroup import Cgroup
from rlvr_jax.sandbox.privilege import NOBODY, SandboxUnavailable, drop_privileges
from rlvr_jax.sandbox.trainer_python import MOUNT_POINTS, SITE_ROOT, TrainerPython  # noqa: F401

WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "box_worker.py")
# The typed value encoding the worker imports beside itself (typed_json.py).
VALUES_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "typed_json.py")
# A session's pid 1 (session.py), which uses the worker script's helpers beside it.
SESSION_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "session_server.py")
PYTHON = "/usr/bin/python3"  # the system interpreter: root-only paths (pyenv in /root) are not
# readable by the sandbox's unprivileged uid (privilege.NOBODY)
SHM_MB = 64  # the /dev/shm tmpfs's cap


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


def bwrap_argv(once: bool, script_fd: int, tmp_mb: int = 64,
               seccomp: Optional[int] = None, python: Optional[TrainerPython] = None,
               binds: Sequence[tuple[str, str]] = (), session_fd: Optional[int] = None,
               tmpfs: Sequence[str] = (), values_fd: Optional[int] = None) -> list[str]:
    """`binds`: (source on the host, path in the sandbox) pairs, read-only (the trainer's
    Python when `python` is set). `session_fd`: run a session's server (session.py) instead
    of the one-shot worker, with the system interpreter. `tmpfs`: more writable top-level
    directories (e.g. /app, a Harbor task's workspace), each a tmpfs capped as /tmp is.
    `values_fd`: typed_json.py, which the worker imports (required to run jobs)."""
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
    if values_fd is not None:
        argv += ["--ro-bind-data", str(values_fd), "/opt/rlvr/typed_json.py"]
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


def _launch(argv: list[str], python: Optional[TrainerPython],
            cgroup: Optional[Cgroup]) -> tuple[list[str], dict]:
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
        return argv, drop_privileges()
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
        argv = bwrap_argv(once=True, script_fd=fd, seccomp=filt)  # a probe: no job runs
        probe = subprocess.run(argv[: argv.index("--")] + ["--", PYTHON, "-I", "-S", "-c",
                                                           "import json, resource"],
                               capture_output=True, text=True, timeout=20, pass_fds=fds,
                               **drop_privileges())
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


def spawn(once: bool, cgroup: Optional[Cgroup] = None, tmp_mb: int = 64,
          python: Optional[TrainerPython] = None, session: bool = False,
          tmpfs: Sequence[str] = ()) -> subprocess.Popen:
    """Start a sandboxed worker; its stdin/stdout speak the JSON-lines protocol. With a
    working cgroup, a shell joins it and execs bwrap, so nothing runs outside it. bwrap starts
    a session (and process group) of its own: `kill` takes the whole group, so a bwrap child
    still setting up (before its die-with-parent is armed) cannot outlive it. `python`: run
    the worker with the trainer's interpreter (a grader's libraries), else the system one.
    `session`: a session's server (session.py), with the system interpreter."""
    fd, filt, vfd = worker_fd(), seccomp_fd(), worker_fd(VALUES_SCRIPT)
    sfd = worker_fd(SESSION_SCRIPT) if session else None
    fds = tuple(f for f in (fd, filt, sfd, vfd) if f is not None)
    argv, drop = _launch(bwrap_argv(once, fd, tmp_mb, seccomp=filt, python=python,
                                    binds=_binds(python), session_fd=sfd, tmpfs=tmpfs,
                                    values_fd=vfd),
                         python, cgroup)
    try:
        return _spawner().submit(
            subprocess.Popen, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, bufsize=0, pass_fds=fds, start_new_session=True,
            **drop).result()
    finally:
        for f in fds:
            os.close(f)  # bwrap holds its own copies until it has read them


_SPAWNER: tuple = (None, None)  # (pid, the thread every sandbox of that process starts from)


def _spawner() -> ThreadPoolExecutor:
    """The one thread, alive as long as the process, that starts every sandbox. bwrap's
    `--die-with-parent` is the kernel's parent-death signal, which follows the *thread* that
    forked it: a sandbox started from a worker thread died when that thread ended (a stream's
    environment threads end with each batch: 25-44% of its sessions failed to open or died,
    measured). Started from here, a sandbox dies with the trainer and with nothing else."""
    global _SPAWNER
    pid, pool = _SPAWNER
    if pid != os.getpid():  # first use, or a forked child (the parent's thread is not here)
        _SPAWNER = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawn"))
    return _SPAWNER[1]


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
