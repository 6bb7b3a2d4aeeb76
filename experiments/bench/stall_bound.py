"""How long a timing-free stream must wait for its slowest calls, at best: a lower bound on
the step time and device idle of any schedule whose turns are fixed to runs without the
clock (issue 40's rule: reproducible), given the calls' latency distribution, the calls a
step issues and the seconds a step decodes. Measured runs (streaming.py) can only be slower.

    python experiments/bench/stall_bound.py [--median 0.2 --p99 5] [--calls 166]
        [--decode-s 1.64 --update-s 1] [--limit 8]

The model. Run j decodes for `decode_s` (the zero-latency step), then the params change for
`update_s`. Each of its `calls` is issued as the run starts (the earliest a turn fixed to
the run can issue it; in a real run most come later), and its reply is needed by run j + L
(the turn after the call is fixed to a later run: L runs of slack; carry.py's turn levels
give L = 1). A run cannot end before its decoding is done nor before every reply it needs
is back:

    end_j = max(start_j + decode_s, start_{j-L} + max_{c issued in run j - L} latency_c)
    start_{j+1} = end_j + update_s

Everything else a real stream pays is left out (chained calls inside a run, rows emptied
while decoding waits on replies, the driver's own time), so this bounds it from below.
The device idle printed is (end_j - start_j - decode_s) / (end_j - start_j) over the runs:
the share of a step spent waiting. A slack of L runs costs a version lag of L runs a
level: at `max_turns` levels an episode's first token is ~L x (turns - 1) updates old at
its update.

Latencies are lognormal (the median and 99th percentile given, as env_latency.py draws
them), optionally cut at an environment's own call limit (`--limit`: a call drawn longer
ends there as a timeout, the episode's own outcome; it is still a wait of `limit` seconds).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from anywhere

from experiments.bench.env_latency import Z99  # noqa: E402


def latencies(rng, shape, median_s: float, p99_s: float, limit_s: float) -> np.ndarray:
    sigma = math.log(p99_s / median_s) / Z99
    return np.minimum(median_s * np.exp(sigma * rng.standard_normal(shape)), limit_s)


def bound(slack: int, *, calls: int, decode_s: float, update_s: float, median_s: float,
          p99_s: float, limit_s: float, runs: int, seed: int) -> tuple[float, float, float]:
    """(mean and median step s / decode_s, idle share) of `runs` steady runs of the model
    above. The mean is what a long run pays; a window of a few steps is nearer the median."""
    rng = np.random.default_rng(seed)
    back_R = np.full(runs + slack, -np.inf)  # when the last reply run j needs is back
    start, steps = 0.0, []
    for j in range(runs):
        end = max(start + decode_s, back_R[j])
        back_R[j + slack] = start + latencies(rng, calls, median_s, p99_s, limit_s).max()
        steps.append(end - start)
        start = end + update_s
    steps_R = np.asarray(steps[slack:])  # the steady runs (the first have nothing due)
    return (float(steps_R.mean() / decode_s), float(np.median(steps_R) / decode_s),
            float(1 - decode_s * len(steps_R) / steps_R.sum()))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--median", type=float, default=0.2)
    ap.add_argument("--p99", type=float, default=5.0)
    ap.add_argument("--limit", type=float, default=math.inf, help="a call's limit, seconds")
    ap.add_argument("--calls", type=int, default=166, help="calls a step issues")
    ap.add_argument("--decode-s", type=float, default=1.64, help="a zero-latency step")
    ap.add_argument("--update-s", type=float, default=1.0)
    ap.add_argument("--slack", default="1,2,4,8,16", help="runs between a call and its use")
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    print(f"{a.calls} calls a step, lognormal(median {a.median} s, p99 {a.p99} s)"
          f"{f', cut at {a.limit} s' if a.limit < math.inf else ''}; decoding "
          f"{a.decode_s} s a step, updates {a.update_s} s; {a.runs} runs\n")
    print("| slack (runs) | step x zero latency, at least: mean | median | device idle, at least |")
    print("|---|---|---|---|")
    for slack in (int(s) for s in a.slack.split(",")):
        ratio, median, idle = bound(slack, calls=a.calls, decode_s=a.decode_s,
                                    update_s=a.update_s, median_s=a.median, p99_s=a.p99,
                                    limit_s=a.limit, runs=a.runs, seed=a.seed)
        print(f"| {slack} | {ratio:.2f} | {median:.2f} | {idle:.1%} |")


if __name__ == "__main__":
    main()
