"""Learning curve of a run: python experiments/math_grpo/plot.py RUN_DIR [OUT.png] [TITLE]

Plots the training accuracy (T=1 rollouts, per step) and the held-out evaluations (greedy and
sampled) written to RUN_DIR/metrics.jsonl."""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(run_dir: str, out: str, title: str) -> None:
    rows = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    train = [(r["step"], r["reward/accuracy"]) for r in rows if "reward/accuracy" in r]
    evals = [r for r in rows if "eval/sampled_accuracy" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    steps, acc = zip(*train)
    window = 10
    smooth = [sum(acc[max(0, i - window + 1): i + 1]) / len(acc[max(0, i - window + 1): i + 1])
              for i in range(len(acc))]
    ax.plot(steps, acc, color="tab:blue", alpha=0.25, lw=1)
    ax.plot(steps, smooth, color="tab:blue", lw=2, label="train rollouts (T=1), 10-step mean")
    ax.plot([r["step"] for r in evals], [r["eval/sampled_accuracy"] for r in evals], "o-",
            color="tab:orange", label="held-out sampled (T=1)")
    ax.plot([r["step"] for r in evals], [r["eval/greedy_accuracy"] for r in evals], "s--",
            color="tab:green", label="held-out greedy")
    ax.axhline(0.9, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("GRPO step (0 = after the supervised warm start)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "learning_curve.png",
         sys.argv[3] if len(sys.argv) > 3
         else "math_grpo: GRPO on top of a warm start from 30%-wrong demonstrations")
