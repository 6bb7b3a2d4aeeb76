"""Code-verifier throughput and latency: forkserver vs fresh sandboxes, side by side.

    python experiments/bench/verifier.py [--jobs 200] [--workers 2]
    python experiments/bench/verifier.py --baseline REV [--rounds 6]

With `--baseline REV` it measures forkserver throughput and latency of this checkout against
the code at git revision REV (checked out into a temporary worktree), in alternating rounds of
the same jobs, each round in a fresh process importing one of the two, and prints the ratio.

For a trivial program (1 call) and a 5-test program, each mode scores the same jobs (distinct,
so the cache never answers); rounds alternate between the modes. These batches saturate the
machine, so their latency is the service time; a second measurement sends lone jobs to an
otherwise idle pool. Prints executions/s, p50/p95
latency per job, the forkserver/fresh ratio, the time to restart a forkserver worker (kill +
spawn + first answer), the slowest job against its deadline, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import rlvr_jax.verify  # noqa: F401 - registers the graders' kinds with the sandbox package
    from rlvr_jax.sandbox.pool import VerifierPool, child_processes
except ImportError:  # a --baseline checkout from before the sandbox package
    from rlvr_jax.verify.pool import VerifierPool, child_processes

TRIVIAL = "def f(x):\n    return x"
FIVE = ("def f(x):\n    s = 0\n    for i in range(x):\n        s += i * i\n    return s")


def jobs(program: str, calls: int, n: int, tag: int) -> list[dict]:
    """n distinct jobs (a unique comment defeats the cache), `calls` small test inputs each."""
    return [{"completion": f"{program}\n# job {tag}-{i}", "entry_point": "f",
             "inputs": [[10 + k] for k in range(calls)], "expected": [None] * calls}
            for i in range(n)]


def run(pool: VerifierPool, batch: list[dict]) -> tuple[float, list[float]]:
    t0 = time.perf_counter()
    verdicts = pool.verify(batch)
    return time.perf_counter() - t0, [v.latency_s for v in verdicts]


_children = child_processes


def pct(xs, q):
    return statistics.quantiles(xs, n=100)[q - 1] if len(xs) > 1 else xs[0]


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# A dataset's own test on the candidate's values (an MBPP assert that is no literal
# comparison): replayed on the host before issue 36, the job's second phase in the sandbox after.
REPLAYED = {"test_list": ["assert set(evens(6)) == {0, 2, 4}"],
            "code": "def evens(n):\n    return [i for i in range(n) if i % 2 == 0]"}


def replay_jobs(n: int, tag: int) -> list[dict]:
    from rlvr_jax.data.code_tests import tests_of

    fields = tests_of(REPLAYED, "bench:1")
    return [dict(fields, completion=f"def evens(n):\n    return list(range(0, n, 2))  # {tag}-{i}")
            for i in range(n)]


def gym_jobs(n: int, tag: int) -> list[dict]:
    """string_insertion answers given as a Python list, the path its scorer `eval`s (in the
    scorer's process before issue 36, in a grandchild after); distinct completions."""
    import reasoning_gym

    entry = reasoning_gym.create_dataset("string_insertion", seed=0, size=2 ** 31 - 1)[7]
    answer = repr(list(entry["answer"]))
    return [{"dataset": "string_insertion", "config": {}, "seed": 0, "index": 7,
             "completion": f"<answer>{answer}</answer> {tag}-{i}"} for i in range(n)]


def one_round(jobs_per_round: int, workers: int, tag: int) -> dict:
    """One forkserver round of each program in this process (whichever rlvr_jax it imports):
    jobs/s and p50 latency, after a warm-up batch."""
    out = {}
    with VerifierPool("code", workers=workers, timeout_s=10.0, mode="forkserver") as pool:
        run(pool, jobs(TRIVIAL, 1, 20, -tag))
        for name, batch in (("trivial", jobs(TRIVIAL, 1, jobs_per_round, tag)),
                            ("5 tests", jobs(FIVE, 5, jobs_per_round, tag)),
                            ("dataset test", replay_jobs(jobs_per_round, tag))):
            wall, lat = run(pool, batch)
            out[name] = {"rate": jobs_per_round / wall, "p50": pct(lat, 50)}
    try:
        import reasoning_gym  # noqa: F401 - the optional extra
    except ImportError:
        return out
    n = max(jobs_per_round // 4, 8)
    with VerifierPool("reasoning_gym", workers=workers, timeout_s=20.0,
                      mode="forkserver") as pool:
        run(pool, gym_jobs(8, -tag))
        wall, lat = run(pool, gym_jobs(n, tag))
        out["gym eval"] = {"rate": n / wall, "p50": pct(lat, 50)}
    return out


def compare(rev: str, jobs_per_round: int, workers: int, rounds: int) -> None:
    """This checkout against `rev`, alternating rounds, each in a fresh process."""
    tmp = tempfile.mkdtemp(prefix="rlvr-baseline-")
    base = os.path.join(tmp, "src")
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "-f", base, rev],
                   check=True, capture_output=True)
    try:
        results = {"baseline": [], "this": []}
        for r in range(rounds):
            for which, src in (("baseline", base), ("this", REPO))[::(-1) ** r]:
                env = dict(os.environ, PYTHONPATH=src)
                proc = subprocess.run(
                    [sys.executable, os.path.abspath(__file__),
                     "--one-round", "--jobs", str(jobs_per_round), "--workers", str(workers),
                     "--tag", str(r)], cwd=src, env=env, capture_output=True, text=True,
                    check=True)
                results[which].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"forkserver, {workers} workers, {jobs_per_round} jobs a round, {rounds} "
              f"alternating rounds (medians); baseline = {rev}")
        print("| program | baseline jobs/s | this jobs/s | ratio | baseline p50 ms | "
              "this p50 ms |")
        print("|---|---|---|---|---|---|")
        for name in [k for k in results["this"][0] if k in results["baseline"][0]]:
            b = [x[name] for x in results["baseline"]]
            t = [x[name] for x in results["this"]]
            rb, rt = (statistics.median(x["rate"] for x in v) for v in (b, t))
            pb, pt = (statistics.median(x["p50"] for x in v) for v in (b, t))
            print(f"| {name} | {rb:.0f} | {rt:.0f} | {rt / rb:.2f}x | {1e3 * pb:.2f} | "
                  f"{1e3 * pt:.2f} |")
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", base],
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--leak-jobs", type=int, default=10_000)
    ap.add_argument("--baseline", metavar="REV", help="compare with the code at this revision")
    ap.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tag", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one_round:  # a child of --baseline: one round, one JSON line
        print(json.dumps(one_round(args.jobs, args.workers, 1_000_000 + args.tag)))
        return
    if args.baseline:
        compare(args.baseline, args.jobs, args.workers, args.rounds)
        return
    timeout = 10.0
    pools = {m: VerifierPool("code", workers=args.workers, timeout_s=timeout, mode=m)
             for m in ("forkserver", "fresh")}
    print(f"{args.workers} workers, {args.jobs} jobs per round, {args.rounds} alternating rounds; "
          f"containment: {pools['fresh'].containment}")
    # Latency of a lone job with the machine otherwise idle, as in a loop that verifies chunk
    # by chunk. One mode at a time, with a pause after each job long enough for a fresh
    # sandbox's replacement to finish booting (it would otherwise load the CPU the next job
    # runs on).
    lone = {m: [] for m in pools}
    for mode, pool in pools.items():
        for i in range(300):
            lone[mode].append(run(pool, jobs(TRIVIAL, 1, 1, 10_000 + i))[1][0])
            time.sleep(0.08)
    for mode, lat in lone.items():
        print(f"lone trivial job, {mode}: p50 {1e3 * pct(lat, 50):.1f} ms, "
              f"p95 {1e3 * pct(lat, 95):.1f} ms")
    print("| program | mode | executions/s | p50 ms | p95 ms | max s |")
    print("|---|---|---|---|---|---|")
    rates = {}
    tag = 0
    for name, program, calls in (("trivial", TRIVIAL, 1), ("5 tests", FIVE, 5)):
        stats = {m: ([], []) for m in pools}
        for _ in range(args.rounds):
            for mode, pool in pools.items():
                tag += 1
                wall, lat = run(pool, jobs(program, calls, args.jobs, tag))
                stats[mode][0].append(args.jobs / wall)
                stats[mode][1].extend(lat)
        for mode, (rate, lat) in stats.items():
            rates[(name, mode)] = statistics.median(rate)
            print(f"| {name} | {mode} | {rates[(name, mode)]:.0f} | {1e3 * pct(lat, 50):.1f} | "
                  f"{1e3 * pct(lat, 95):.1f} | {max(lat):.2f} |")
        print(f"| {name} | ratio | {rates[(name, 'forkserver')] / rates[(name, 'fresh')]:.1f}x "
              "forkserver/fresh | | | |")
    fork = pools["forkserver"]
    restarts = []
    for i in range(10):
        w = fork._workers[0]
        t0 = time.perf_counter()
        fork._replace(w)
        fork.verify([{"completion": TRIVIAL, "entry_point": "f", "inputs": [[-i]],
                      "expected": [None]}])
        restarts.append(time.perf_counter() - t0)
    print(f"forkserver worker restart (kill + spawn + first answer): median "
          f"{1e3 * statistics.median(restarts):.0f} ms")
    hung = fork.verify([{"completion": "import time\ndef f(x):\n    time.sleep(60)",
                         "entry_point": "f", "inputs": [[i]], "expected": [None]}
                        for i in range(4)])
    print(f"4 jobs sleeping 60 s (sandbox wall limit 6 s, pool deadline {timeout:.0f} s): "
          f"statuses {sorted({v.status.name for v in hung})}, slowest answered after "
          f"{max(v.latency_s for v in hung):.2f} s")
    fds = len(os.listdir("/proc/self/fd"))
    t0 = time.perf_counter()
    n_leak = 0
    for start in range(0, args.leak_jobs, 1000):
        n_leak += len(fork.verify(jobs(TRIVIAL, 1, min(1000, args.leak_jobs - start), -start)))
    print(f"{n_leak} more forkserver jobs in {time.perf_counter() - t0:.0f} s: children now "
          f"{len(_children())} (both pools' {args.workers} workers each), zombies "
          f"{sum(s == 'Z' for _, s in _children())}, open fds {len(os.listdir('/proc/self/fd'))}"
          f" (before {fds})")
    for p in pools.values():
        p.close()
    print(f"after close: children {len(_children())}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MB")


if __name__ == "__main__":
    main()
