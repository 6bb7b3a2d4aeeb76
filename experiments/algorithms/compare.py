"""Compare algorithm presets over seeds: python experiments/algorithms/compare.py SWEEP_DIR [OUT.png]

Reads every SWEEP_DIR/<experiment>_seed<k>/{summary.json,metrics.jsonl} written by the
multirun in experiments/algorithms/README.md, prints a markdown table (mean and min..max over
seeds) and plots held-out sampled accuracy against RL step (mean line, min..max band)."""

from __future__ import annotations

import collections
import glob
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["math_grpo", "math_drgrpo", "math_dapo", "math_rloo", "math_ppo"]


def load(sweep: str) -> dict:
    runs = collections.defaultdict(list)
    for path in sorted(glob.glob(f"{sweep}/*/summary.json")):
        run = os.path.dirname(path)
        name = os.path.basename(run).rsplit("_seed", 1)[0]
        rows = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
        steps = [r for r in rows if "time/step_s" in r]
        runs[name].append({
            "summary": json.load(open(path)),
            "evals": [(r["step"], r["eval/sampled_accuracy"]) for r in rows
                      if "eval/sampled_accuracy" in r],
            "step_s": statistics.median(r["time/step_s"] for r in steps),
            "rl_s": sum(r["time/step_s"] for r in steps),
            "update_s": statistics.median(r["time/update_s"] for r in steps),
            "sequences": sum(r["status/pass"] + r["status/wrong"] + r["status/unparseable"]
                             for r in steps),
        })
    return runs


def spread(xs, fmt="{:.3f}") -> str:
    m = statistics.mean(xs)
    return f"{fmt.format(m)} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


def table(runs: dict) -> str:
    lines = ["| preset | seeds | sampled acc. start | sampled acc. end | greedy end | "
             "RL steps s (sum; no warm start, no evals) | median step s | median update s | sampled seqs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in [n for n in ORDER if n in runs] + sorted(set(runs) - set(ORDER)):
        rs = runs[name]
        s = [r["summary"] for r in rs]
        lines.append(
            f"| {name} | {len(rs)} | {spread([x['eval/sampled_accuracy_start'] for x in s])} | "
            f"{spread([x['eval/sampled_accuracy_end'] for x in s])} | "
            f"{spread([x['eval/greedy_accuracy_end'] for x in s])} | "
            f"{spread([r['rl_s'] for r in rs], '{:.0f}')} | "
            f"{spread([r['step_s'] for r in rs], '{:.2f}')} | "
            f"{spread([r['update_s'] for r in rs], '{:.2f}')} | "
            f"{statistics.mean(r['sequences'] for r in rs):.0f} |")
    return "\n".join(lines)


def plot(runs: dict, out: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for name in [n for n in ORDER if n in runs]:
        curves = [dict(r["evals"]) for r in runs[name]]
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        ys = [[c[s] for c in curves] for s in steps]
        line, = ax.plot(steps, [statistics.mean(y) for y in ys], "o-", label=name, lw=1.5, ms=3)
        ax.fill_between(steps, [min(y) for y in ys], [max(y) for y in ys], alpha=0.15,
                        color=line.get_color())
    ax.set_xlabel("RL step (0 = after the shared supervised warm start)")
    ax.set_ylabel("held-out sampled accuracy (T=1)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("2-digit addition, 100 steps x 64 prompts x 8 samples; mean, min..max of seeds")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    runs = load(sys.argv[1])
    print(table(runs))
    plot(runs, sys.argv[2] if len(sys.argv) > 2 else "curves.png")
