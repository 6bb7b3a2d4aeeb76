"""The in-sandbox side of a session (rlvr_jax/sandbox/session.py): pid 1 of a bubblewrap
sandbox that lives for one episode. Run by the system interpreter, `-I -S`, stdlib only,
beside the one-shot worker (/opt/rlvr/worker.py), whose helpers it uses.

Two processes. This one (trusted, pid 1: the kernel drops what the namespace sends it) talks
JSON lines with the host and owns the limits; the *world* (untrusted) is a child forked from
it that holds the episode's state: the environment's tool module, executed once when the
session starts (a spare, before any episode is given to it), then `setup(**context)` at
`open` (the episode's seed), then one call after another in the same
interpreter, so variables, imports and files persist between calls. The world holds only its
own pipes (none of the host's), its stdout and stderr go to a pipe this process drains and
caps, and it runs under rlimits (address space, processes, file size, open files, CPU per
world) with the OOM killer's first choice on it.

    host -> {"tools": src, "names": [...], "limits": {...}}       (with the spawn: the world
         <- {"ready": 1} | {"ready": 0, "detail": ...}            is forked and loads it)
    host -> {"op": "open", "context": {...}}                      (the episode starts)
         <- {"status": "ok", "observation": what setup returned} | {"status": "setup_error",
             "detail": ...}
    host -> {"op": "call", "tool": name, "arguments": {...}}
         <- {"status": "ok", "value"|"error": ..., "stdout": ..., "restarted"?: true}
            status "timeout": the call ran past `call_s` (interrupted with SIGINT: the state
            is kept; or, when it would not stop, the world was killed and started again
            from the tool module: its state is lost, `restarted`); "died": the world exited
            or was killed (its memory, a signal) and was started again (`restarted`)
    host -> {"op": "collect", "paths": [...]}
         <- {"status": "ok", "files": {path: base64}, "missing": [...]}: the world and every
            process it left are killed first (nothing changes a file while it is read); only
            regular files, never through a symlink, each up to `file_bytes`, `total_bytes` in all

Every reply carries the request's `id`. A world that misbehaves (garbage on its reply pipe,
a reply past the cap) is restarted and the call reports what happened: all of it is the
agent's doing, an observation, never a failure of the session. What only this process can
get wrong (a bug here) is a `sandbox_error` reply, which the host masks.
"""

import base64
import json
import os
import resource
import select
import signal
import stat
import sys
import time

sys.path.insert(0, "/opt/rlvr")
import worker as box  # noqa: E402  the one-shot worker's helpers (signals, reaping, dumping)

WORKSPACE = "/tmp"  # the session's writable, size-capped tmpfs, and the world's cwd (or the
                    # environment's own top-level directory, e.g. /app, given at load)
MAX_REPLY_BYTES = 1 << 20  # a world's reply line past this is the agent's error
INTERRUPT_GRACE_S = 0.3  # after SIGINT at a call's deadline, before the world is killed
PRELOAD = ("ast", "base64", "collections", "fnmatch", "functools", "itertools", "math",
           "random", "re", "sqlite3", "subprocess", "tempfile", "traceback")


def _world_main(tools, names, lim, req_r, rep_w, out_w):
    """The world: never returns."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a call's deadline interrupts
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    keep = sorted({0, 1, 2, req_r, rep_w})
    for lo, hi in zip(keep, keep[1:] + [os.sysconf("SC_OPEN_MAX")]):
        os.closerange(lo + 1, hi)
    box._oom_first()
    box._no_dump()
    for res, value in ((resource.RLIMIT_AS, lim["memory_mb"] << 20),
                       (resource.RLIMIT_CPU, lim["cpu_s"]),
                       (resource.RLIMIT_NPROC, lim["processes"]),
                       (resource.RLIMIT_FSIZE, lim["file_mb"] << 20),
                       (resource.RLIMIT_NOFILE, lim["open_files"]),
                       (resource.RLIMIT_MSGQUEUE, 0), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = sys.stdout
    requests, replies = os.fdopen(req_r, "rb"), os.fdopen(rep_w, "wb")

    def reply(obj):
        if os.getpid() != me:
            os._exit(0)
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        try:
            line = json.dumps(obj)
        except (TypeError, ValueError, RecursionError, OverflowError):
            line = json.dumps({"error": "the tool's result is not JSON"})
        replies.write(line.encode() + b"\n")
        replies.flush()

    me = os.getpid()
    scope = {"__name__": "__session__"}
    try:  # loaded ahead of its episode (a spare): only the setup waits for the episode
        exec(compile(tools, "<tools>", "exec"), scope)
    except BaseException as e:  # the environment's own code: the host masks the episode
        reply({"setup_error": f"{type(e).__name__}: {e}"[:2000]})
        os._exit(0)
    reply({"loaded": 1})
    try:
        context = json.loads(requests.readline())["setup"]
        first = scope["setup"](**context) if callable(scope.get("setup")) else None
    except BaseException as e:
        reply({"setup_error": f"{type(e).__name__}: {e}"[:2000]})
        os._exit(0)
    reply({"ready": 1, "value": first})  # what setup returns: the episode's first observation
    for line in requests:
        if os.getpid() != me:  # a fork of the world that returned from a call: only the
            os._exit(0)        # world answers (a fork bomb's children never read requests)
        try:
            call = json.loads(line)
            fn = scope[call["tool"]] if call["tool"] in names else None
            if fn is None:
                reply({"error": f"no tool {call['tool']!r}"})
                continue
            value = fn(**call["arguments"])
            reply({"value": value})
        except KeyboardInterrupt:
            reply({"interrupted": 1})
        except MemoryError:
            reply({"error": "MemoryError: the call ran out of memory"})
        except BaseException as e:  # SystemExit included: the tool's error, state kept
            try:
                reply({"error": f"{type(e).__name__}: {e}"[:2000]})
            except BaseException:
                reply({"error": type(e).__name__})
    os._exit(0)


class SetupError(Exception):
    """The environment's module or its setup failed (its code, not the agent's)."""


class World:
    """The world process as pid 1 sees it: forked and loaded with the environment's module
    ahead of its episode; `setup(context)` starts the episode."""

    def __init__(self, spec):
        self.spec = spec
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                _world_main(spec["tools"], set(spec["names"]), spec["limits"], req_r, rep_w,
                            out_w)
            finally:
                os._exit(70)
        for fd in (req_r, rep_w, out_w):
            os.close(fd)
        os.set_blocking(self.out_r, False)
        self.buf = b""
        self.out = b""

    def send(self, obj):
        os.write(self.req_w, json.dumps(obj).encode() + b"\n")

    def drain(self, cap):
        """Keep up to `cap` bytes of the world's output; read (and drop) the rest."""
        while True:
            try:
                chunk = os.read(self.out_r, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.out = (self.out + chunk)[:cap + 1]

    def take_output(self, cap):
        self.drain(cap)
        text = self.out[:cap].decode("utf-8", "replace")
        if len(self.out) > cap:
            text += "\n...[output cut]"
        self.out = b""
        return text

    def read_reply(self, deadline, cap):
        """The world's next reply line (a dict), None past the deadline, or "dead"."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.rep_r, self.out_r], [], [], left)
            if self.out_r in ready:
                self.drain(cap)
            if self.rep_r in ready:
                chunk = os.read(self.rep_r, 1 << 16)
                if not chunk:
                    return "dead"
                self.buf += chunk
                if len(self.buf) > MAX_REPLY_BYTES:
                    return {"error": "the tool's result is too large"}
        line, _, self.buf = self.buf.partition(b"\n")
        try:
            msg = json.loads(line)
        except ValueError:
            return {"error": "the session's reply was garbled (the agent wrote to it)"}
        return msg if isinstance(msg, dict) else {"error": "the session's reply was garbled"}

    def wait_for(self, key):
        """Wait for the world's `key` reply ("loaded", "ready"); raise SetupError if not."""
        lim = self.spec["limits"]
        got = self.read_reply(time.monotonic() + lim["start_s"], lim["output_bytes"])
        self.take_output(0)
        if not (isinstance(got, dict) and key in got):
            detail = (got.get("setup_error") or got.get("error")) if isinstance(got, dict) else got
            raise SetupError(str(detail or f"the world did not start within {lim['start_s']} s"))
        return got

    def setup(self, context):
        """The episode's setup; -> what it returned (its first observation, or None)."""
        self.context = context
        self.send({"setup": context})
        return self.wait_for("ready").get("value")

    def close(self):
        for fd in (self.req_w, self.rep_r, self.out_r):
            try:
                os.close(fd)
            except OSError:
                pass


def _status_of_exit(pid):
    try:
        _, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return ""
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return f"exit code {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else ""


def _restart(world):
    """Kill the world and everything it left, then start it again from the tool module."""
    world.close()
    box._kill_others()
    fresh = World(world.spec)
    fresh.wait_for("loaded")
    fresh.setup(world.context)
    return fresh


def call(world, req):
    lim = world.spec["limits"]
    cap = lim["output_bytes"]
    world.take_output(0)  # what a background process printed between calls is dropped
    try:
        world.send({"tool": req["tool"], "arguments": req["arguments"]})
    except OSError:  # its request pipe is closed: the world is gone
        pass
    got = world.read_reply(time.monotonic() + lim["call_s"], cap)
    status, reply = "ok", {}
    if got is None:  # past the deadline: interrupt; kill if it will not stop
        status = "timeout"
        try:
            os.kill(world.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        got = world.read_reply(time.monotonic() + INTERRUPT_GRACE_S, cap)
    if got == "dead" or got is None:
        if got == "dead":
            status = "died"
            time.sleep(0.01)
            reply["exit"] = _status_of_exit(world.pid)
        reply["stdout"] = world.take_output(cap)
        reply["restarted"] = True
        return status, reply, _restart(world)
    reply["stdout"] = world.take_output(cap)
    for key in ("value", "error"):
        if key in got:
            reply[key] = got[key]
    return status, reply, world


MAX_LISTED = 2000  # entries a pattern's walk looks at


def _expand(paths):
    """The paths, each pattern (with * ? [) replaced by the workspace's regular files that
    match it (relative paths, sorted; the walk follows no symlink and stops at MAX_LISTED)."""
    import fnmatch

    out, listed = [], None
    for path in paths:
        if not any(c in path for c in "*?["):
            out.append(path)
            continue
        if listed is None:
            listed = []
            for top, dirs, names in os.walk(WORKSPACE, followlinks=False):
                dirs.sort()
                listed += sorted(os.path.relpath(os.path.join(top, n), WORKSPACE)
                                 for n in names)
                if len(listed) > MAX_LISTED:
                    break
            listed = listed[:MAX_LISTED]
        out += [p for p in listed if fnmatch.fnmatch(p, path) and p not in out]
    return out


def collect(world, req):
    """The declared files, read by this process once nothing else runs."""
    lim = world.spec["limits"] if world else {"file_bytes": 1 << 20, "total_bytes": 4 << 20}
    if world:
        world.close()
    box._kill_others()
    files, missing, total = {}, [], 0
    for path in _expand(req.get("paths", [])):
        full = os.path.normpath(os.path.join(WORKSPACE, path))
        if not full.startswith(WORKSPACE + "/"):
            missing.append(path)
            continue
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            missing.append(path)
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                missing.append(path)
                continue
            data = os.read(fd, lim["file_bytes"] + 1)
        finally:
            os.close(fd)
        if len(data) > lim["file_bytes"] or total + len(data) > lim["total_bytes"]:
            missing.append(path)
            continue
        total += len(data)
        files[path] = base64.b64encode(data).decode()
    return {"status": "ok", "files": files, "missing": missing}


def main():
    global WORKSPACE
    if os.getpid() != 1:
        sys.exit("session_server.py runs only as pid 1 of a bubblewrap sandbox (--as-pid-1)")
    box._immune_to_signals()
    box._no_dump()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open("/dev/null", os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.chdir(WORKSPACE)
    box._warm()
    # What environment modules commonly import, loaded before the session is ready (off
    # the clock of its start): each world is forked from here and finds them loaded.
    for module in PRELOAD:
        try:
            __import__(module)
        except ImportError:
            pass
    # The first line is the environment's module (sent with the spawn): the world is
    # forked and loads it before this session says ready.
    world = None
    try:
        load = json.loads(sys.stdin.readline())
        WORKSPACE = load.get("workspace", WORKSPACE)
        os.chdir(WORKSPACE)
        world = World(load)
        world.wait_for("loaded")
        out.write('{"ready": 1}\n')
    except Exception as e:  # SetupError included: the environment's module does not load
        detail = str(e) if isinstance(e, SetupError) else f"{type(e).__name__}: {e}"
        out.write(json.dumps({"ready": 0, "detail": detail[:2000]}) + "\n")
        return
    for line in sys.stdin:
        req = {}
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "open":
                try:
                    reply = {"status": "ok", "observation": world.setup(req.get("context", {}))}
                except SetupError as e:
                    reply = {"status": "setup_error", "detail": str(e)}
            elif op == "call":
                if world is None:
                    raise RuntimeError("a call before open")
                status, reply, world = call(world, req)
                reply["status"] = status
            elif op == "collect":
                reply = collect(world, req)
                world = None
            else:
                raise RuntimeError(f"unknown op {op!r}")
        except Exception as e:  # a bug of ours (or the environment's setup): masked
            reply = {"status": "sandbox_error", "detail": f"{type(e).__name__}: {e}"[:500]}
        reply["id"] = req.get("id") if isinstance(req, dict) else None
        out.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
