"""The objectives compared: python experiments/objectives/compare.py RUNS_DIR [OUT.png]

Reads RUNS_DIR/<arm>_seed<k>/{summary.json,metrics.jsonl} (experiments/objectives/run.sh),
prints a markdown table per arm (mean and min..max over seeds of held-out sampled accuracy
at the start, mid-run and end; greedy at the end; the policy's entropy at the first and last
step; the mean of every fraction the objective reports: clipped, masked, detached,
penalised), names runs that collapsed (final sampled accuracy below the start) and, apart,
runs whose entropy ended under a tenth of its first step's (a converged run's does too: not a
collapse by itself), and plots sampled accuracy against RL step."""

from __future__ import annotations

import collections
import glob
import json
import os
import statistics
import sys

ORDER = ["clip", "gspo", "cispo", "sapo", "gmpo", "kl_cov", "clip_cov", "dppo_tv", "dppo_kl",
         "maxrl", "grpo_format", "gdpo_format"]


def load(runs: str) -> dict:
    arms = collections.defaultdict(list)
    for path in sorted(glob.glob(f"{runs}/*_seed*/summary.json")):
        run = os.path.dirname(path)
        arm, seed = os.path.basename(run).rsplit("_seed", 1)
        rows = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
        steps = [r for r in rows if "train/entropy" in r]
        evals = [(r["step"], r["eval/sampled_accuracy"], r.get("eval/greedy_accuracy"))
                 for r in rows if "eval/sampled_accuracy" in r]
        fracs = sorted({k for r in steps for k in r if k.startswith("train/") and
                        "_frac" in k and "capped" not in k})
        arms[arm].append({
            "seed": int(seed), "evals": evals,
            "entropy": (steps[0]["train/entropy"], steps[-1]["train/entropy"]),
            "fracs": {k[len("train/"):]: statistics.mean(r.get(k, 0.0) for r in steps)
                      for k in fracs},
            "step_s": statistics.median(r["time/step_s"] for r in steps if "time/step_s" in r),
        })
    return arms


def spread(xs) -> str:
    xs = list(xs)
    if len(xs) == 1:
        return f"{xs[0]:.3f}"
    return f"{statistics.mean(xs):.3f} ({min(xs):.3f}..{max(xs):.3f})"


def collapsed(run) -> bool:
    return run["evals"][-1][1] < run["evals"][0][1]


def entropy_fell(run) -> bool:
    h0, h1 = run["entropy"]
    return h1 < 0.1 * h0


def table(arms: dict) -> str:
    mid = lambda run: min(run["evals"], key=lambda e: abs(e[0] - run["evals"][-1][0] / 2))[1]
    lines = ["| arm | seeds | start | mid-run | end (sampled) | end (greedy) | entropy first -> "
             "last | fractions (mean over steps) | step s | collapsed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for arm in [a for a in ORDER if a in arms] + sorted(set(arms) - set(ORDER)):
        rs = arms[arm]
        fr = collections.defaultdict(list)
        for r in rs:
            for k, v in r["fracs"].items():
                fr[k].append(v)
        fractions = ", ".join(f"{k} {statistics.mean(v):.4f}" for k, v in sorted(fr.items())
                              if max(v) > 0) or "-"
        down = [r["seed"] for r in rs if collapsed(r)]
        low = [r["seed"] for r in rs if entropy_fell(r)]
        lines.append(
            f"| {arm} | {len(rs)} | {spread(r['evals'][0][1] for r in rs)} | "
            f"{spread(mid(r) for r in rs)} | **{spread(r['evals'][-1][1] for r in rs)}** | "
            f"{spread(r['evals'][-1][2] for r in rs)} | "
            f"{statistics.mean(r['entropy'][0] for r in rs):.3f} -> "
            f"{statistics.mean(r['entropy'][1] for r in rs):.3f} | {fractions} | "
            f"{statistics.median(r['step_s'] for r in rs):.2f} | "
            f"{'seeds ' + ', '.join(map(str, down)) if down else 'no'}"
            f"{' (entropy < 0.1x: ' + ', '.join(map(str, low)) + ')' if low else ''} |")
    return "\n".join(lines)


def plot(arms: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for arm in [a for a in ORDER if a in arms]:
        by_step = collections.defaultdict(list)
        for r in arms[arm]:
            for step, acc, _ in r["evals"]:
                by_step[step].append(acc)
        steps = sorted(by_step)
        ax.plot(steps, [statistics.mean(by_step[s]) for s in steps], label=arm, marker=".")
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out sampled accuracy (T=1), mean over seeds")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    arms = load(sys.argv[1])
    print(table(arms))
    if len(sys.argv) > 2:
        plot(arms, sys.argv[2])
