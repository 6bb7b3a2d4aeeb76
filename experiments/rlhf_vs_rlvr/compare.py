"""GRPO on the verifier vs GRPO on a learned reward vs DPO:
python experiments/rlhf_vs_rlvr/compare.py SWEEP_DIR [OUT.png]

Reads SWEEP_DIR/<arm>_seed<k>/{summary.json,metrics.jsonl} written by the commands in this
folder's README (arms: grpo, rlhf_kl<beta>, dpo; rm_seed<k> are the reward models), prints a
markdown table (mean and min..max over seeds) and plots, against the fraction of each run's
steps, the proxy (the reward model's mean score of held-out samples at T=1, as a change from
the start) and the gold (their verified accuracy): over-optimisation is the proxy rising
while the gold falls. Each arm: the mean over seeds, with a min..max band."""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _rows(run: str) -> list[dict]:
    return [json.loads(line) for line in open(f"{run}/metrics.jsonl")]


def arm_order(name: str) -> tuple:
    if name == "grpo":
        return (0, 0.0)
    if name.startswith("rlhf_kl"):
        return (1, float(name[len("rlhf_kl"):]))
    return (2, 0.0)


def label(name: str) -> str:
    if name == "grpo":
        return "GRPO, verifier reward"
    if name.startswith("rlhf_kl"):
        return f"GRPO, reward model, KL {name[len('rlhf_kl'):]}"
    return "DPO, same pairs"


def load(sweep: str) -> tuple[dict, dict]:
    arms, rms = collections.defaultdict(list), {}
    for path in sorted(glob.glob(f"{sweep}/*_seed*/summary.json")):
        run = os.path.dirname(path)
        name, seed = re.fullmatch(r"(.+)_seed(\d+)", os.path.basename(run)).groups()
        summary = json.load(open(path))
        if name == "rm":
            rms[int(seed)] = summary
            continue
        rows = _rows(run)
        steps = summary["train/steps"]
        evals = [r for r in rows if "eval/sampled_learned_reward" in r]
        train = [r for r in rows if "train/kl_ref" in r]
        arms[name].append({
            "seed": int(seed), "summary": summary, "steps": steps,
            "x": [r["step"] / steps for r in evals],
            "gold": [r["eval/sampled_accuracy"] for r in evals],
            "greedy": [r["eval/greedy_accuracy"] for r in evals],
            "proxy": [r["eval/sampled_learned_reward"] for r in evals],
            "kl_ref": train[-1]["train/kl_ref"] if train else None,
        })
    return arms, rms


def spread(xs, fmt="{:.3f}") -> str:
    if len(xs) == 1:
        return fmt.format(xs[0])
    return f"{fmt.format(statistics.mean(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


def table(arms: dict, rms: dict) -> str:
    lines = []
    if rms:
        lines += ["reward models (held-out pairwise accuracy; labels agree with the truth "
                  f"{1 - next(iter(rms.values()))['rm/label_noise']:.2f} of the time): "
                  f"against the truth {spread([r['rm/heldout_gold_accuracy'] for r in rms.values()])}"
                  f", against the labels "
                  f"{spread([r['rm/heldout_label_accuracy'] for r in rms.values()])}; "
                  f"{spread([r['train/wall_seconds'] for r in rms.values()], '{:.0f}')} s each", ""]
    lines += ["| arm | seeds | gold: sampled acc. start | peak | end | greedy end | "
              "proxy: RM score start | end | KL to ref. at end | wall s |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name in sorted(arms, key=arm_order):
        runs = arms[name]
        peak = [max(zip(r["gold"], r["x"])) for r in runs]
        kl = [r["kl_ref"] for r in runs if r["kl_ref"] is not None]
        lines.append(" | ".join([
            f"| {label(name)}", str(len(runs)), spread([r["gold"][0] for r in runs]),
            spread([p[0] for p in peak]) + f" at {statistics.mean(p[1] for p in peak):.2f}",
            f"**{spread([r['gold'][-1] for r in runs])}**",
            spread([r["greedy"][-1] for r in runs]), spread([r["proxy"][0] for r in runs]),
            spread([r["proxy"][-1] for r in runs]), spread(kl) if kl else "-",
            spread([r["summary"]["train/wall_seconds"] for r in runs], "{:.0f}") + " |"]))
    return "\n".join(lines)


def plot(arms: dict, out: str) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, name in enumerate(sorted(arms, key=arm_order)):
        runs = arms[name]
        n = min(len(r["x"]) for r in runs)
        x = runs[0]["x"][:n]
        for ax, key in zip(axes, ("proxy", "gold")):
            # The proxy as a change from the run's start: each seed's reward model has its
            # own offset (a Bradley-Terry score is defined up to a constant).
            ys = list(zip(*((r[key][:n] if key == "gold" else
                             [v - r[key][0] for v in r[key][:n]]) for r in runs)))
            ax.plot(x, [statistics.mean(y) for y in ys], color=f"C{i}", label=label(name))
            ax.fill_between(x, [min(y) for y in ys], [max(y) for y in ys], color=f"C{i}",
                            alpha=0.15)
    axes[0].set(title="proxy: reward model's score of held-out samples",
                xlabel="fraction of the run's steps", ylabel="mean score - its value at 0")
    axes[1].set(title="gold: verified accuracy of held-out samples (T=1)",
                xlabel="fraction of the run's steps", ylabel="accuracy")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> None:
    arms, rms = load(argv[0])
    print(table(arms, rms))
    if len(argv) > 1:
        plot(arms, argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
