"""The process that runs inside the bubblewrap sandbox (standalone: stdlib only, since the
sandbox holds the system interpreter, this file and typed_json.py beside it, not the rlvr_jax
package).

    python3 /opt/rlvr/worker.py          serve jobs from stdin until it closes (forkserver)
    python3 /opt/rlvr/worker.py --once   serve one job, then exit (fresh)

Its first line on stdout is `{"ready": 1}`, once warmed up: the host counts a job's deadline
from the send to a ready worker, so a slow start is never the candidate's timeout.

It is pid 1 of the sandbox's pid namespace (bwrap --as-pid-1), non-dumpable (no ptrace, no
/proc/1/mem from its children). Ahead of each job it forks a child (non-dumpable, warmed up on a
dummy program so fork's copy-on-write faults are paid while idle) that waits for the job; the
child then sets its rlimits, compiles and runs the candidate program with stdout/stderr on a
capped pipe, then calls the requested functions and writes their return values (JSON; for code
jobs typed_json's encoding) as one line on a separate result pipe. The worker enforces the wall
deadline and the output and result caps, checks the result line (the child runs the candidate:
nothing it says is trusted, see `_checked`), answers one JSON line carrying the job's id, and
only then kills every other process in the namespace (the child, leftover daemons, fork bombs),
empties /tmp and /dev/shm (without recursion or long paths, within CLEANUP_S) and resets and
probes their roots (mode, extended attributes, a write: else it exits and the host starts a
fresh sandbox), removes every System V IPC object, forks the next job's child and says
`{"ready": 1}` again: the host sends the next job only then, so one job's cleanup never runs on
the next one's clock. A job with a `check` (a dataset's own test) has a second phase before the
reply: every candidate process killed, then a fresh child forked from the worker runs the test
on the candidate's returned values (`run_check`). In `--once` (fresh) mode it exits after the
reply: the sandbox goes whole. The job's child makes itself the OOM killer's first choice (for
good: see `_oom_first`). Expected values never meet candidate code: outputs are compared on the
host, or by the second phase's test after the candidate is gone. Our own harness keeps nothing
on the candidate's mounts (a stdin case is a memory file).

Signals: as pid 1 of its namespace with every handler at SIG_DFL (or SIG_IGN), the worker is
immune to signals sent from inside the namespace (the kernel drops them for a namespace's init),
so a candidate cannot kill or interrupt it. Whatever a candidate does is its own verdict: every
path from the child's result to the reply is guarded, and only the worker's own bugs can end in
`sandbox_error`.
"""

import ctypes
import json
import os
import random  # noqa: F401 - the second phase's tests use it: imported once, not per fork
import resource
import select
import signal
import sys
import time

# The typed value encoding (typed_json.py), bound beside this script: -I leaves this directory
# off sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import typed_json  # noqa: E402

PR_SET_DUMPABLE = 4
IPC_RMID = 0
# What the worker parses and answers: nesting deeper than this in a result is the candidate's
# runtime error (JSON parsers recurse per level; the host's must never be reached past this).
MAX_RESULT_DEPTH = 100


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once: dlopen in every child cost ~0.7 ms
_FILTERED = False  # set in main(): a seccomp filter (bwrap.py's) is on this process


def _no_dump():
    try:
        _LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception:
        pass


def _warm():
    """What a job's child does first, on a dummy: the page faults of compile/exec/json in a
    fresh fork (copy-on-write) then happen before the job arrives, not while it is timed."""
    namespace = {}
    exec(compile("def f(x):\n    return [x, {'k': x}]", "<warm>", "exec"), namespace)
    json.loads(json.dumps({"value": typed_json.encode(namespace["f"](1))}))


def _oom_first():
    """Make this process the OOM killer's first choice in the sandbox (score adjustment
    1000), before the candidate runs: when the sandbox's memory runs out, the candidate goes,
    not the worker. Set before the process becomes non-dumpable, which makes its /proc files
    root's: the candidate cannot lower it again. (Whoever is killed, the host reads the
    cgroup's OOM count and reports the candidate's memory limit.)"""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _child(job, out_w, res_w):
    """Runs in the forked child once its job has arrived; never returns."""
    lim = job["limits"]
    for res, value in ((resource.RLIMIT_AS, lim["memory_mb"] << 20),
                       (resource.RLIMIT_CPU, lim["cpu_s"]),
                       (resource.RLIMIT_NPROC, lim["processes"]),
                       (resource.RLIMIT_FSIZE, lim["file_mb"] << 20),
                       (resource.RLIMIT_NOFILE, lim["open_files"]),
                       (resource.RLIMIT_MSGQUEUE, 0),  # no POSIX message queues
                       (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    os.close(out_w)
    res = os.fdopen(res_w, "w")

    def finish(obj):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        try:
            res.write(json.dumps(obj) + "\n")
            res.flush()
        finally:
            os._exit(0)

    if job.get("kind") == "sql":
        _sql(job, finish)
    try:
        code = compile(job["program"], "<candidate>", "exec")
    except (SyntaxError, ValueError) as e:
        finish({"status": "syntax_error", "detail": f"{type(e).__name__}: {e}"})
    if "stdin" in job:  # stdin/stdout tests: the whole program once per input, as __main__
        try:
            finish({"status": "ok", "outputs": [_stdio_case(code, text)
                                                for text in job["stdin"]]})
        except MemoryError:
            finish({"status": "memory_limit", "detail": "MemoryError"})
    namespace = {"__name__": "__main__" if job.get("as_main") else "__candidate__"}
    outputs = []
    # typed: arguments and return values in typed_json's encoding (code jobs), so a tuple, a
    # set or an int-keyed dict reaches the host as what it is; else plain JSON
    typed = bool(job.get("typed"))
    args_of = lambda call: typed_json.decode(call.get("args", [])) if typed else call.get(
        "args", [])
    as_data = typed_json.encode if typed else (lambda value: value)
    try:
        exec(code, namespace)
        for call in job.get("calls", []):
            try:
                value = namespace[call["fn"]](*args_of(call))
                outputs.append({"value": json.loads(json.dumps(as_data(value)))})
            except MemoryError:
                raise
            except (TypeError, ValueError, OverflowError) as e:  # incl. not JSON-serialisable
                outputs.append({"error": f"{type(e).__name__}: {e}"[:300]})
            except KeyError as e:
                outputs.append({"error": f"KeyError: {e}"[:300]})
            except Exception as e:
                outputs.append({"error": f"{type(e).__name__}: {e}"[:300]})
    except MemoryError:
        finish({"status": "memory_limit", "detail": "MemoryError"})
    except BaseException as e:  # SystemExit included: exiting early is a failure
        finish({"status": "runtime_error", "detail": f"{type(e).__name__}: {e}"[:500],
                "outputs": outputs})
    finish({"status": "ok", "outputs": outputs})


def _stdio_case(code, text):
    """Run the compiled program as __main__ with `text` on its standard input (fd 0 too, for
    `open(0)`), and return what it wrote to sys.stdout: {"value": str} or {"error": str}.
    SystemExit(0 / None) is a normal end; any other exit or exception is the case's error."""
    import io

    # The input lives in a memory file, not in /tmp: nothing a previous job (or this
    # program's earlier case) left on a mount can make our own harness fail.
    fd = os.memfd_create("stdin")
    data = text.encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data):]
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)
    out = io.BytesIO()
    sys.stdin = io.TextIOWrapper(os.fdopen(0, "rb", closefd=False))
    sys.stdout = wrapper = io.TextIOWrapper(out, write_through=True)
    error = None
    try:
        exec(code, {"__name__": "__main__"})
    except SystemExit as e:
        if e.code not in (None, 0):
            error = f"SystemExit: {e.code!r}"
    except MemoryError:
        raise
    except BaseException as e:
        try:
            error = f"{type(e).__name__}: {e}"
        except BaseException:  # an exception whose __str__ raises
            error = type(e).__name__
    try:
        wrapper.flush()
        wrapper.detach()  # keeps `out` open when the wrapper is collected
    except Exception:
        pass
    sys.stdout = sys.__stdout__
    if error is not None:
        return {"error": error[:300]}
    return {"value": out.getvalue().decode("utf-8", "replace")}


def _sql(job, finish):
    """Run one read-only query against an in-memory SQLite database built from the job's
    schema script; the rows come back, the expected rows stay on the host."""
    import sqlite3

    deadline = time.monotonic() + job["limits"]["cpu_s"]
    try:
        con = sqlite3.connect(":memory:")
        con.executescript(job["schema"])
        con.execute("PRAGMA query_only = ON")
    except sqlite3.Error as e:
        finish({"status": "sandbox_error", "detail": f"schema: {e}"})
    con.set_progress_handler(lambda: time.monotonic() > deadline, 10000)
    try:
        rows = con.execute(job["query"]).fetchmany(job.get("max_rows", 10000) + 1)
    except sqlite3.OperationalError as e:
        if "interrupted" in str(e):
            finish({"status": "timeout", "detail": "query time limit"})
        kind = "syntax_error" if "syntax error" in str(e) else "runtime_error"
        finish({"status": kind, "detail": f"{e}"[:300]})
    except (sqlite3.Error, sqlite3.Warning, ValueError) as e:
        finish({"status": "runtime_error", "detail": f"{type(e).__name__}: {e}"[:300]})
    except MemoryError:
        finish({"status": "memory_limit", "detail": "MemoryError"})
    if len(rows) > job.get("max_rows", 10000):
        finish({"status": "output_limit", "detail": "too many rows"})
    finish({"status": "ok", "outputs": [{"value": [list(r) for r in rows]}]})


def _kill_others():
    """As pid 1 of the namespace: SIGKILL every other process and reap them all. Every process
    of the namespace descends from this one and an orphan is reparented to it, so once waitpid
    finds no child, only a process forked while the signal went round can be left: the signal
    goes round again, until kill finds nobody. (Blocking waits: no polling sleep, which cost a
    millisecond per job, on the clock of a job's second phase.)"""
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CLEANUP_S = 2.0  # past this the worker exits instead (the host starts a fresh sandbox)


def _empty(root, deadline):
    """Delete everything below the directory `root` (kept, its mode restored to 1777); True
    once it is empty, False past `deadline` or when something will not go.

    No recursion and no long paths, whatever tree the candidate left (nested past PATH_MAX or
    past Python's recursion limit, any modes): one directory is open at a time and everything
    is removed relative to it (unlinkat / rmdirat / openat), the names on the way down kept
    on a list and parents reopened through "..". Every candidate process is dead by now, so
    the tree holds still. Each directory is made 0700 (we are its owner) before it is read."""
    try:
        cur = os.open(root, _DIR)
    except OSError:
        return False
    names, ops = [], 0
    try:
        while True:
            subdirs, seen = [], 0
            with os.scandir(cur) as entries:
                for e in entries:
                    ops += 1
                    seen += 1
                    if ops % 1024 == 0 and time.monotonic() > deadline:
                        return False
                    try:
                        if e.is_dir(follow_symlinks=False):
                            subdirs.append(e.name)
                        else:
                            os.unlink(e.name, dir_fd=cur)
                    except OSError:
                        pass
            below = None
            for name in subdirs:  # empty ones go at once; the first that is not, we enter
                ops += 1
                if ops % 1024 == 0 and time.monotonic() > deadline:
                    return False
                try:
                    os.rmdir(name, dir_fd=cur)
                except OSError:
                    below = name
                    break
            if below is not None:
                try:
                    os.chmod(below, 0o700, dir_fd=cur)
                    child = os.open(below, _DIR, dir_fd=cur)
                except OSError:
                    return False
                names.append(below)
                os.close(cur)
                cur = child
                continue
            if not names:
                if not seen:  # the common case: the job left nothing
                    return True
                with os.scandir(cur) as entries:
                    return next(entries, None) is None
            parent = os.open("..", _DIR, dir_fd=cur)
            os.close(cur)
            cur = parent
            try:
                os.rmdir(names.pop(), dir_fd=cur)
            except OSError:
                return False
            if time.monotonic() > deadline:
                return False
    except OSError:
        return False
    finally:
        os.close(cur)
        try:
            os.chmod(root, 0o1777)
        except OSError:
            pass


def _remove_ipc():
    """Remove every System V shared memory segment, message queue and semaphore set of the
    sandbox's IPC namespace: they outlive the processes that made them."""
    for kind, ctl in (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl")):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            try:
                ipc_id = int(row.split()[1])
                if kind == "sem":
                    _LIBC.semctl(ipc_id, 0, IPC_RMID)
                else:
                    getattr(_LIBC, ctl)(ipc_id, IPC_RMID, None)
            except (ValueError, IndexError, AttributeError):
                pass


def _drain(fd, buf, limit):
    """Read what is available on fd now, without blocking; False once past `limit`."""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            return False
    return True


class _Spare:
    """A child forked ahead of its job: non-dumpable and warmed, blocked reading its job."""

    def __init__(self, warm=True):
        job_r, self.job_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.res_r, res_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            # Nothing of the worker's stays open in the child: not its reply channel to the
            # host (a candidate could write verdict lines there), not its job channel.
            null = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            keep = sorted({0, 1, 2, job_r, out_w, res_w})
            for lo, hi in zip(keep, keep[1:] + [os.sysconf("SC_OPEN_MAX")]):
                os.closerange(lo + 1, hi)
            _oom_first()  # while still dumpable: after that, /proc/self is not ours to write
            _no_dump()
            if warm:  # off the clock for a spare; a second phase's child runs on it
                _warm()
            with os.fdopen(job_r, "rb") as f:
                job = json.loads(f.read())
            _child(job, out_w, res_w)
        for fd in (job_r, out_w, res_w):
            os.close(fd)


# What a job's child may report. The child runs the candidate, so its result is untrusted:
# anything else (or anything malformed) is the candidate's doing, a runtime error. A sandbox
# error is claimable only by an SQL job's child (a broken schema): an SQL candidate is a query,
# it cannot write to descriptors. A Python candidate claiming one would have its sample masked
# out of the loss instead of scored: a reward hack.
_CHILD_STATUSES = {"ok", "syntax_error", "runtime_error", "memory_limit"}
_SQL_STATUSES = _CHILD_STATUSES | {"timeout", "output_limit", "sandbox_error"}


def _depth(value, limit):
    """Nesting depth of a parsed JSON value, counted without recursion, up to `limit` + 1."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            if d > limit:
                return d
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _checked(job, raw):
    """The child's result line as a reply, or the candidate's runtime error when it is not a
    well-formed one. Nothing in `raw` can make this raise: the child runs the candidate, which
    can write any bytes there (a wrong type, a nesting past any parser's recursion)."""
    malformed = {"status": "runtime_error", "detail": "malformed result"}
    try:
        reply = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return malformed
    try:
        sql = job.get("kind") == "sql"
        status = reply.get("status") if isinstance(reply, dict) else None
        if not isinstance(status, str) or status not in (
                _SQL_STATUSES if sql else _CHILD_STATUSES):
            return malformed
        outputs = reply.get("outputs", [])
        n_calls = 1 if sql else len(job.get("calls") or job.get("stdin") or [])
        if not isinstance(outputs, list) or not all(
                isinstance(o, dict) and len(o) == 1 and ("value" in o or "error" in o)
                for o in outputs) or (status == "ok" and len(outputs) != n_calls):
            return malformed
        if _depth(outputs, MAX_RESULT_DEPTH) > MAX_RESULT_DEPTH:
            return {"status": "runtime_error",
                    "detail": f"result nested deeper than {MAX_RESULT_DEPTH} levels"}
        return {"status": status, "detail": str(reply.get("detail", ""))[:500],
                "outputs": outputs}
    except Exception as e:  # noqa: BLE001 - whatever the shape, it is the candidate's doing
        return {"status": "runtime_error", "detail": f"malformed result ({type(e).__name__})"}


def run_job(job, spare):
    """Hand the job to the spare child and wait for its result line, its death, the wall
    deadline or the output cap, whichever comes first. The child may still be running:
    `cleanup` follows (after the reply has been sent, to keep it off the job's latency)."""
    lim = job["limits"]
    t0 = time.monotonic()
    out_r, res_r, pid = spare.out_r, spare.res_r, spare.pid
    with os.fdopen(spare.job_w, "wb") as f:
        f.write(json.dumps(job).encode())
    spare.pidfd = pidfd = os.pidfd_open(pid)
    deadline = t0 + lim["wall_s"]
    out, res, status, wstatus = bytearray(), bytearray(), None, None
    watch = {out_r, res_r, pidfd}
    while status is None and wstatus is None and b"\n" not in res:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        for fd in select.select(list(watch), [], [], left)[0]:
            if fd == pidfd:
                # The child is gone. Its leftover processes may still hold the pipes open:
                # take what is there now rather than waiting for EOF.
                _, wstatus, _ = os.wait4(pid, 0)
            elif fd == out_r:
                if not _drain(out_r, out, lim["output_bytes"]):
                    status = "output_limit"
            elif not _drain(res_r, res, lim.get("result_bytes", 1 << 20)):
                status = "output_limit"
    if status is None and not (_drain(out_r, out, lim["output_bytes"])
                               and _drain(res_r, res, lim.get("result_bytes", 1 << 20))):
        status = "output_limit"
    elapsed = time.monotonic() - t0
    stdout = bytes(out[:2000]).decode("utf-8", "replace")
    if status:
        return {"status": status, "detail": f"after {elapsed:.2f}s", "stdout": stdout}
    if b"\n" in res:
        reply = _checked(job, bytes(res).split(b"\n", 1)[0])
    else:  # the loop ended on the child's death (no status, no result line): no result
        sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            reply = {"status": "timeout", "detail": f"CPU limit (signal {sig})"}
        elif sig == signal.SIGXFSZ:
            reply = {"status": "output_limit", "detail": "file size limit"}
        else:
            code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else -sig
            reply = {"status": "runtime_error",
                     "detail": f"exited without a result (code {code})"}
    reply["stdout"] = stdout
    return reply


def _reset_root(root):
    """Put a wiped mount's root back as the sandbox made it, metadata included: mode 1777,
    no extended attributes (a default ACL or a `user.*` attribute would outlive the wipe; the
    seccomp filter denies setting them, this covers hosts without it), then check that a file
    can be made, written, read and removed there. False when any of it fails: the worker then
    exits and the host starts a fresh sandbox (our harness never runs on a poisoned mount)."""
    try:
        os.chmod(root, 0o1777)
        for name in os.listxattr(root):
            # security.* labels belong to the host's LSM; nothing else may stay.
            if not name.startswith("security."):
                os.removexattr(root, name)
        if any(not n.startswith("security.") for n in os.listxattr(root)):
            return False
        probe = os.path.join(root, ".rlvr-probe")
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            ok = os.write(fd, b"ok") == 2 and os.pread(fd, 2, 0) == b"ok"
        finally:
            os.close(fd)
            os.unlink(probe)
        return ok
    except OSError:
        return False


def run_check(check, reply, spares):
    """The job's second phase: a dataset's own test (trusted code, e.g. HumanEval's `check`)
    called on the values the candidate returned, `check["fn"](*check["args"], outputs)`, in a
    child forked from this worker only after every process of the candidate is dead. So the
    test and its expected values never share a process, or a moment, with candidate code,
    and the host never runs it on candidate values (which may make it loop or allocate without
    bound): its time and memory are the sandbox's, under the job's deadline. Its answer must be
    [passed (bool), detail (str)]; a limit it hits on those values is the candidate's."""
    _kill_others()
    second = _Spare(warm=False)
    spares.append(second)
    got = run_job({"program": check["program"], "limits": check["limits"],
                   "calls": [{"fn": check["fn"],
                              "args": list(check["args"]) + [reply["outputs"]]}]}, second)
    status = got.get("status")
    value = (got.get("outputs") or [{}])[0].get("value") if status == "ok" else None
    if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], bool)
            and isinstance(value[1], str)):
        return dict(reply, check={"passed": value[0], "detail": value[1][:300]})
    if status in ("timeout", "memory_limit", "output_limit"):
        return {"status": status, "stdout": reply.get("stdout", ""),
                "detail": f"the dataset's test on the returned values: {got.get('detail', '')}"}
    return {"status": "runtime_error", "stdout": reply.get("stdout", ""),
            "detail": "the dataset's test failed on the returned values: "
                      f"{str(got.get('detail') or got.get('outputs'))[:200]}"}


def cleanup(spares):
    """Kill the job's child and whatever it left behind, close its pipes, empty /tmp and
    /dev/shm and reset their roots (mode, attributes, a write probe), remove System V IPC
    objects (none can exist where the seccomp filter denies them): nothing of this job is
    there for the next. False when the mounts could not be emptied within CLEANUP_S or their
    roots not reset: then the worker exits and the host starts a fresh sandbox."""
    _kill_others()
    for spare in spares:
        for fd in (spare.out_r, spare.res_r, getattr(spare, "pidfd", None)):
            if fd is not None:
                os.close(fd)
    deadline = time.monotonic() + CLEANUP_S
    clean = all(_empty(root, deadline) and _reset_root(root) for root in ("/tmp", "/dev/shm"))
    if not _FILTERED:
        _remove_ipc()
    return clean


def _seccomp_filtered():
    """Whether a seccomp filter is on this process (bwrap.py's denies System V IPC, so no
    IPC object can exist to remove)."""
    try:
        with open("/proc/self/status") as f:
            return any(line.split() == ["Seccomp:", "2"] for line in f)
    except OSError:
        return False


def _immune_to_signals():
    """Every catchable signal at SIG_DFL (SIG_IGN stays SIG_IGN): the kernel then drops the
    signals that processes of the namespace send to its pid 1. Python's own SIGINT handler
    (KeyboardInterrupt) would otherwise let a candidate stop the worker."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass


def main():
    # Safety: after each job this process kills "every other process it can signal"
    # (kill(-1)). That is only the sandbox's own pid namespace when it is its pid 1; run
    # anywhere else, it would kill the host's processes. Refuse.
    if os.getpid() != 1:
        sys.exit("box_worker.py runs only as pid 1 of a bubblewrap sandbox (--as-pid-1)")
    _immune_to_signals()
    _no_dump()
    global _FILTERED
    _FILTERED = _seccomp_filtered()
    once = "--once" in sys.argv
    out = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open("/dev/null", os.O_WRONLY)
    os.dup2(devnull, 1)
    # A grader's modules (e.g. reasoning_gym), imported once here (their prints go nowhere):
    # each job's child is forked from this process and finds them loaded (the trainer's
    # interpreter only: bwrap.py).
    for arg in sys.argv[1:]:
        if arg.startswith("--path="):  # the trainer's site directories, in its order
            import site

            for path in filter(None, arg[len("--path="):].split(os.pathsep)):
                site.addsitedir(path)
    for arg in sys.argv[1:]:
        if arg.startswith("--preload="):
            for module in filter(None, arg[len("--preload="):].split(",")):
                __import__(module)
    # Warm this process too, once: the first compile() in a process initialises state that
    # each forked child otherwise builds again for itself (~3 ms of page faults per child on
    # this VM, against ~0.4 ms once the parent has compiled before forking).
    _warm()
    spare = _Spare()
    out.write('{"ready": 1}\n')  # started: the host's job deadlines count from here
    for line in sys.stdin:
        job_id = None
        spares = [spare]
        try:
            job = json.loads(line)  # from the host: trusted
            job_id = job.get("id")
            reply = run_job(job, spare)
            if "check" in job and reply.get("status") == "ok":
                reply = run_check(job["check"], reply, spares)
        except Exception as e:  # a worker bug: the host reports a sandbox error
            reply = {"status": "sandbox_error", "detail": f"{type(e).__name__}: {e}"}
        reply["id"] = job_id  # the host matches replies to jobs by id, never by order
        out.write(json.dumps(reply) + "\n")
        if once:  # fresh: the whole sandbox goes with this process, nothing to clean
            break
        if not cleanup(spares):
            break  # a tree too large to empty in time: a fresh sandbox is cheaper
        spare = _Spare()  # after the cleanup: the next job's child starts from a clean state
        # Ready again: the host sends the next job only now, so this cleanup never runs on
        # the next job's clock.
        out.write('{"ready": 1}\n')


if __name__ == "__main__":
    main()
