"""Synchronous vs asynchronous rollouts over seeds:
python experiments/async/compare.py RUNS_DIR [OUT.png]

Reads RUNS_DIR/<arm>_s<seed>/{summary.json,metrics.jsonl} (experiments/async/run.sh),
prints a markdown table (mean and min..max over seeds) of step time and its parts, the share
of the step spent waiting for verdicts, and held-out accuracy; plots held-out sampled accuracy
against RL step and against RL wall-clock (the steps' own seconds, evaluations excluded:
every arm runs the same evaluations) into OUT.png (default RUNS_DIR/curves.png)."""

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

ARMS = ("sync", "async_token", "async_dualclip", "async_token_lr", "streamed", "carried")


def load(runs_dir: str) -> dict:
    runs = collections.defaultdict(list)
    for path in sorted(glob.glob(f"{runs_dir}/*_s*/summary.json")):
        run = os.path.dirname(path)
        arm = os.path.basename(run).rsplit("_s", 1)[0]
        rows = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
        steps = [r for r in rows if "time/step_s" in r]
        clock = {0: 0.0}
        for r in steps:
            clock[r["step"]] = clock[r["step"] - 1] + r["time/step_s"]
        med = lambda key: statistics.median(r[key] for r in steps)
        runs[arm].append({
            "summary": json.load(open(path)),
            "evals": [(r["step"], clock[r["step"]], r["eval/sampled_accuracy"]) for r in rows
                      if "eval/sampled_accuracy" in r],
            "step_s": med("time/step_s"), "take_s": med("time/take_s"),
            "sample_s": med("time/sample_s"), "verify_s": med("time/verify_s"),
            "update_s": med("time/update_s"),
            "wait_share": statistics.median(r["time/verify_s"] / r["time/step_s"]
                                            for r in steps),
            "rl_s": clock[max(clock)],
        })
    return runs


def spread(values) -> str:
    values = list(values)
    return f"{statistics.mean(values):.3f} ({min(values):.3f}..{max(values):.3f})"


def table(runs: dict) -> str:
    cols = [("step s (median)", lambda r: r["step_s"]),
            ("batch wait s (take)", lambda r: r["take_s"]),
            ("sampling s", lambda r: r["sample_s"]),
            ("verdict wait s", lambda r: r["verify_s"]),
            ("verdict wait / step", lambda r: r["wait_share"]),
            ("update s", lambda r: r["update_s"]),
            ("RL wall s", lambda r: r["rl_s"]),
            ("sampled acc. start", lambda r: r["summary"]["eval/sampled_accuracy_start"]),
            ("sampled acc. end", lambda r: r["summary"]["eval/sampled_accuracy_end"]),
            ("greedy acc. end", lambda r: r["summary"]["eval/greedy_accuracy_end"])]
    lines = ["| | " + " | ".join(a for a in ARMS if a in runs) + " |",
             "|---|" + "---|" * sum(a in runs for a in ARMS)]
    for name, get in cols:
        lines.append(f"| {name} | " + " | ".join(spread(get(r) for r in runs[a])
                                                 for a in ARMS if a in runs) + " |")
    return "\n".join(lines)


def plot(runs: dict, out: str, title: str) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for arm, color in zip(ARMS, ("tab:blue", "tab:orange", "tab:green", "tab:red",
                                 "tab:purple", "tab:brown")):
        for i, r in enumerate(runs.get(arm, [])):
            steps, clock, acc = zip(*r["evals"])
            label = arm if i == 0 else None
            axes[0].plot(steps, acc, color=color, alpha=0.8, label=label)
            axes[1].plot(clock, acc, color=color, alpha=0.8, label=label)
    axes[0].set_xlabel("RL step")
    axes[1].set_xlabel("RL wall-clock s (step time, evaluations excluded)")
    for ax in axes:
        ax.set_ylabel("held-out sampled pass rate")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{title}: {', '.join(a for a in ARMS if a in runs)}; 3 seeds")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    runs_dir = sys.argv[1].rstrip("/")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(runs_dir, "curves.png")
    runs = load(runs_dir)
    print(table(runs))
    plot(runs, out, os.path.basename(runs_dir))


if __name__ == "__main__":
    main()
