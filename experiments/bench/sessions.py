"""Sandbox sessions (rlvr_jax/sandbox/session.py) against today's per-call worker, same run.

    python experiments/bench/sessions.py [--starts 100] [--calls 200] [--live 256]

Measures, on this machine:
  * session start: p50 / p99 of `open` of one python_repl session when a spare is ready (as
    in training, where spares are started while a step runs), and of 16 at once with 16
    spares ready (one episode batch); then back to back with 2 spares and with none (each
    open waits for sandboxes to start: sessions per second, bounded by the CPU);
  * call round trip: p50 / p99 of a trivial call (`1 + 1`) in an open session, against the
    same call through the stateless tool environment's per-call worker (forkserver pool,
    kind tool_run): the baseline;
  * live sessions: opens `--live` python_repl sessions, each holding a small value, and
    reports the host memory they take (MemAvailable before - after, per session) and a call
    to all of them at once; then closes them and counts what is left (must be 0).
Prints one table; every number is from this run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from rlvr_jax.envs import make_environment, registry  # noqa: E402
from rlvr_jax.sandbox.session import SessionLimits, SessionPool, Spec  # noqa: E402


def pct(xs, q):
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--live", type=int, default=256)
    a = ap.parse_args()
    world = registry.world("python_repl")
    spec = Spec(world.session_source, world.tools)
    call = ("python", {"code": "1 + 1"})
    rows = []

    for spares in (2, 0):
        pool = SessionPool(spec, SessionLimits(), max_live=a.live + 16, spares=spares)
        starts = []
        t_all = time.perf_counter()
        for _ in range(a.starts):
            t0 = time.perf_counter()
            s = pool.open([{}])
            starts.append(time.perf_counter() - t0)
            assert s[0].state == "open", s[0].error
            pool.close(s)
        per_s = a.starts / (time.perf_counter() - t_all)
        rows.append((f"start back to back, {spares} spares (ms)", pct(starts, 50) * 1e3,
                     pct(starts, 99) * 1e3, f"{per_s:.0f} sessions/s open+close"))
        pool.shutdown()

    pool = SessionPool(spec, SessionLimits(), max_live=a.live + 16, spares=16)
    ready = []
    for _ in range(a.starts):  # as in training: the spares had the last step to get ready
        pool._await_ready(pool._spares, time.monotonic() + 30)
        t0 = time.perf_counter()
        s = pool.open([{}])
        ready.append(time.perf_counter() - t0)
        pool.close(s)
    rows.append(("session start, a spare ready (ms)", pct(ready, 50) * 1e3,
                 pct(ready, 99) * 1e3, "the module loaded ahead; open = setup round trip"))
    batch_ready = []
    for _ in range(max(a.starts // 16, 3)):
        pool._await_ready(pool._spares, time.monotonic() + 30)
        t0 = time.perf_counter()
        s = pool.open([{}] * 16)
        batch_ready.append(time.perf_counter() - t0)
        pool.close(s)
    rows.append(("16 at once, 16 spares ready (ms)", pct(batch_ready, 50) * 1e3,
                 pct(batch_ready, 99) * 1e3, "one episode batch per step"))
    pool.shutdown()
    pool = SessionPool(spec, SessionLimits(), max_live=a.live + 16, spares=2)
    batch = []
    for _ in range(max(a.starts // 16, 3)):
        t0 = time.perf_counter()
        s = pool.open([{}] * 16)
        batch.append(time.perf_counter() - t0)
        pool.close(s)
    rows.append(("16 at once, back to back, 2 spares (ms)", pct(batch, 50) * 1e3,
                 pct(batch, 99) * 1e3,
                 f"{16 / statistics.median(batch):.0f} sessions/s: sandbox starts, CPU-bound"))

    s = pool.open([{}])
    trips = []
    for _ in range(a.calls):
        t0 = time.perf_counter()
        r = pool.call(s, [call])
        trips.append(time.perf_counter() - t0)
    assert r[0]["value"] == "2", r
    pool.close(s)
    rows.append(("trivial call, session (ms)", pct(trips, 50) * 1e3, pct(trips, 99) * 1e3, ""))

    env = make_environment(["python"], "hermes", workers=2, timeout_s=5.0,
                           batch_timeout_s=60.0, mode="forkserver")
    text = env.render_call("python", {"code": "result = 1 + 1"})
    base = []
    for i in range(a.calls):  # distinct calls: the pool's verdict cache never answers
        text = env.render_call("python", {"code": f"result = 1 + 1  # {i}"})
        t0 = time.perf_counter()
        r = env.respond([text])
        base.append(time.perf_counter() - t0)
    assert r[0].text == "2", r
    env.close()
    rows.append(("trivial call, per-call worker (ms)", pct(base, 50) * 1e3, pct(base, 99) * 1e3,
                 f"baseline; session/worker p50 {pct(trips, 50) / pct(base, 50):.2f}x"))

    before = mem_available()
    live = []
    t0 = time.perf_counter()
    while len(live) < a.live:
        live += pool.open([{}] * min(32, a.live - len(live)))
    opened_s = time.perf_counter() - t0
    ok = sum(x.state == "open" for x in live)
    r = pool.call(live, [("python", {"code": "x = list(range(1000)); len(x)"})] * len(live))
    t_call = time.perf_counter()
    r = pool.call(live, [call] * len(live))
    t_call = time.perf_counter() - t_call
    used = before - mem_available()
    answered = sum(x.get("value") == "2" for x in r)
    pool.close(live)
    time.sleep(0.2)
    rows.append((f"{a.live} live sessions", used / 2**30, used / max(ok, 1) / 2**20,
                 f"GiB / MiB each; {ok} open in {opened_s:.1f} s; one call to all "
                 f"{t_call * 1e3:.0f} ms, {answered} answered; left after close: "
                 f"{pool.leaked()}"))
    pool.shutdown()

    print(f"| {'measure':38s} | {'p50':>8s} | {'p99':>8s} | notes |")
    print(f"|{'-' * 40}|{'-' * 10}|{'-' * 10}|-------|")
    for name, p50, p99, note in rows:
        print(f"| {name:38s} | {p50:8.2f} | {p99:8.2f} | {note} |")


if __name__ == "__main__":
    main()
