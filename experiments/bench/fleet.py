"""Verification and episode sessions on a Ray fleet (verifier.backend=ray, env.backend=ray:
rlvr_jax/sandbox/fleet.py) against the local pools, on this machine, in one run:

    python experiments/bench/fleet.py [--jobs 64 --nodes 1,2 --workers 2 --sessions 16]
                                      [--address HOST:PORT]

A local Ray cluster (a head, and `nodes` fleet machines started as processes on 127.0.0.1,
each with the `sandbox` resource) verifies batches of distinct code jobs (each a correct
program; the cache never answers). Reports jobs/s for the local pool (`--workers` workers)
and for the fleet with one actor per simulated machine (`--workers` workers each), and the
round trip of a one-job batch (the overhead per call). Then session calls: `--sessions`
python_repl sessions (one per episode) each called `--repeats` x 4 times, all of a round
in one `step` (as a batch's episodes are), local session pool against session actors (one
per machine): calls/s and one call's round trip. The simulated machines share this
machine's cores: growth with nodes here shows the fleet's overhead, not a real fleet's
capacity. `--address`: a running cluster instead (one arm, an actor per machine that
declares the `sandbox` resource): a real fleet's numbers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from anywhere

RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def node_pids(mark: str) -> list[int]:
    """Processes whose command line contains `mark` (a cluster's directory or socket)."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mark.encode() in f.read():
                    out.append(int(pid))
        except (OSError, ValueError):
            pass
    return out


def start_cluster(machines: int, sandbox: int, tmp: str) -> str:
    """A head (no sandbox resource) and `machines` fleet nodes, all on 127.0.0.1, their
    files under `tmp` (short: Ray's socket paths must fit 107 bytes); -> the address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", "--num-cpus=1"]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    subprocess.run([RAY, "start", "--head", f"--port={port}", "--include-dashboard=false",
                    f"--temp-dir={tmp}", *common], check=True, env=env, capture_output=True,
                   timeout=120)
    for _ in range(machines):
        subprocess.run([RAY, "start", f"--address=127.0.0.1:{port}",
                        f'--resources={{"sandbox": {sandbox}}}', *common], check=True, env=env,
                       capture_output=True, timeout=120)
    return f"127.0.0.1:{port}"


def stop_cluster(tmp: str) -> None:
    """Every process of the cluster started under `tmp` (and no other's), then its files."""
    for pid in node_pids(tmp):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(tmp, ignore_errors=True)


def _jobs(n: int, tag: str) -> list[dict]:
    return [{"completion": f"def f(x):\n    return x + 1  # {tag} {i}", "entry_point": "f",
             "inputs": [[i]], "expected": [i + 1]} for i in range(n)]


def _rate(verifier, n: int, repeats: int, tag: str) -> tuple[float, float]:
    """(jobs/s over `repeats` batches of n, median one-job round trip s)."""
    verifier.verify(_jobs(n, f"{tag} warm"))  # workers up, imports done
    t0 = time.perf_counter()
    for r in range(repeats):
        got = verifier.verify(_jobs(n, f"{tag} {r}"))
        assert all(v.status.name == "PASS" for v in got), got[:2]
    rate = n * repeats / (time.perf_counter() - t0)
    trips = []
    for r in range(5):
        t1 = time.perf_counter()
        verifier.verify(_jobs(1, f"{tag} one {r}"))
        trips.append(time.perf_counter() - t1)
    return rate, statistics.median(trips)


def _session_rate(fleet, sessions: int, rounds: int) -> tuple[float, float]:
    """(session calls/s over `rounds` calls of each of `sessions` python_repl sessions, all
    of a round in one step; median one-call round trip s)."""
    from rlvr_jax import envs
    from rlvr_jax.sandbox.session import SessionLimits

    env = envs.make_session_environment("python_repl", "tag", limits=SessionLimits(
        call_s=10.0), max_live=sessions, spares=2, fleet=fleet)
    call = lambda code: env.render_call("python", {"code": code})
    try:
        eps = env.open([{} for _ in range(sessions)])
        try:
            env.step(eps, [call("x = 0")] * sessions)  # sessions up and warm
            t0 = time.perf_counter()
            for r in range(rounds):
                got = env.step(eps, [call(f"x = x + {r}\nx") for _ in eps])
                assert all(x.outcome == "ok" for x in got), got[:2]
            rate = sessions * rounds / (time.perf_counter() - t0)
            trips = []
            for r in range(5):
                t1 = time.perf_counter()
                env.step(eps[:1], [call("x")])
                trips.append(time.perf_counter() - t1)
        finally:
            env.close_episodes(eps)
    finally:
        env.close()
    return rate, statistics.median(trips)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=64, help="per batch")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--nodes", default="1,2", help="simulated fleet machines per arm")
    ap.add_argument("--workers", type=int, default=2, help="per pool")
    ap.add_argument("--sessions", type=int, default=16, help="live sessions called at once")
    ap.add_argument("--address", default="", help="a running cluster (no local one started)")
    args = ap.parse_args()
    import ray

    from rlvr_jax.config.fleet import FleetConfig
    from rlvr_jax.verify.verifiers import make_verifier

    def verifier(fleet=None):
        return make_verifier("code", workers=args.workers, timeout_s=10.0,
                             batch_timeout_s=None, mode="forkserver", fleet=fleet)

    rows, calls = [], []
    local = verifier()
    try:
        rows.append(("local pool", args.workers, *_rate(local, args.jobs, args.repeats, "l")))
    finally:
        local.close()
    calls.append(("local session pool", *_session_rate(None, args.sessions, 4 * args.repeats)))
    for n in [int(x) for x in args.nodes.split(",")] if not args.address else [0]:
        tmp = f"/tmp/rlvr_ray_bench_{os.getpid()}"
        try:
            address = args.address or start_cluster(n, 1, tmp)
            if args.address:  # an actor per machine with the resource
                ray.init(address=address, log_to_driver=False, configure_logging=False)
                n = sum(1 for x in ray.nodes() if x["Alive"] and x["Resources"].get("sandbox"))
            config = FleetConfig(address=address, namespace="bench", actors=n)
            name = f"Ray, {n} machine{'s' * (n > 1)}"
            try:
                fleet = verifier(config)
                try:
                    rows.append((name, n * args.workers,
                                 *_rate(fleet, args.jobs, args.repeats, f"r{n}")))
                finally:
                    fleet.close()
                calls.append((name, *_session_rate(config, args.sessions,
                                                   4 * args.repeats)))
            finally:
                ray.shutdown()
        finally:
            stop_cluster(tmp)
    base = rows[0][2]
    print(f"{args.repeats} batches of {args.jobs} code jobs (distinct correct programs), "
          f"{args.workers} workers per pool, {os.cpu_count()} cores\n")
    print("| verifier | workers | jobs/s | x local | one-job round trip ms |")
    print("|---|---|---|---|---|")
    for name, workers, rate, trip in rows:
        print(f"| {name} | {workers} | {rate:.1f} | {rate / base:.2f} | {trip * 1e3:.0f} |")
    print(f"\n{args.sessions} python_repl sessions, {4 * args.repeats} calls each, a round's "
          "calls in one step\n")
    print("| sessions on | calls/s | x local | one-call round trip ms |")
    print("|---|---|---|---|")
    for name, rate, trip in calls:
        print(f"| {name} | {rate:.1f} | {rate / calls[0][1]:.2f} | {trip * 1e3:.0f} |")


if __name__ == "__main__":
    main()
