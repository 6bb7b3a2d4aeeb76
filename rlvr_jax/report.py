"""Look at runs: a markdown table across them and a PNG of their curves.

    python -m rlvr_jax.report RUN_DIR [RUN_DIR ...] [--out curves.png] [--smooth 10]

Reads each run directory's metrics.jsonl (and run_config.json, summary.json when there), so it
works offline and on finished, stopped or still-running runs (a last line being written is
skipped). The table: job, steps done of the run's total, held-out accuracy (sampled at T=1 and
greedy) at the start and at the latest evaluation, the training accuracy over the last
`--smooth` steps, a reward model's held-out pairwise accuracy, wall seconds and state. The
PNG: held-out sampled (solid) and greedy (dashed) accuracy, and the training accuracy
(smoothed, faint), against the step, one colour per run. A run is named by its preset and
the overrides its directory names (`repl_agent env.wrap=...`; the preset alone for its plain
run), or by its path where two would share a name. A directory that holds no run is one
error line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional


class NotARun(ValueError):
    """The path holds no run (no metrics.jsonl)."""


def read_rows(run_dir: str) -> list[dict]:
    """metrics.jsonl's rows; a line that does not parse (one being written) is skipped."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise NotARun(f"{run_dir}: not a run directory (no metrics.jsonl)")
    rows = []
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
    return rows


def _json(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def label(run_dir: str, cfg: dict) -> str:
    """A run's name in the table and legend: its preset (the config's `name`) and its
    directory, which names the overrides that change its result (`default` for none)."""
    folder = os.path.basename(os.path.normpath(run_dir)) or run_dir
    name = cfg.get("name")
    if not name or name == folder:
        return folder
    return name if folder == "default" else f"{name} {folder}"


def _distinct(runs: list[dict], dirs: list[str]) -> None:
    """Runs that would share a label (the same preset and overrides elsewhere) are named by
    their paths instead."""
    for r, d in zip(runs, dirs):
        if sum(o["run"] == r["run"] for o in runs) > 1:
            r["path_label"] = os.path.relpath(d)
    for r in runs:
        r["run"] = r.pop("path_label", r["run"])


def summarize(run_dir: str, smooth: int = 10) -> dict:
    """One run's row of the table (plain values; None where a run has no such number)."""
    rows = read_rows(run_dir)
    cfg = _json(os.path.join(run_dir, "run_config.json")) or {}
    summary = _json(os.path.join(run_dir, "summary.json"))
    job = str(cfg.get("job", "rl"))
    total = {"rl": cfg.get("num_steps"), "reward_model": (cfg.get("reward_model") or {}).get(
        "steps"), "dpo": (cfg.get("dpo") or {}).get("steps")}.get(job)
    evals = [r for r in rows if "eval/sampled_accuracy" in r]
    train = [r["reward/accuracy"] for r in rows if "reward/accuracy" in r]
    done = max([r["step"] for r in rows if any(k.startswith(("reward/", "rm/", "dpo/"))
                                               for k in r)] or [0])
    finished = summary is not None and summary.get("train/steps") == total
    wall = _json(os.path.join(run_dir, "wall_seconds.json")) or {}
    pairwise = (summary or {}).get("rm/heldout_gold_accuracy",
                                   (summary or {}).get("rm/heldout_label_accuracy"))
    return {
        "run": label(run_dir, cfg), "job": job,
        "steps": done, "total": total,
        "sampled": (evals[0]["eval/sampled_accuracy"], evals[-1]["eval/sampled_accuracy"])
        if evals else None,
        "greedy": (evals[0]["eval/greedy_accuracy"], evals[-1]["eval/greedy_accuracy"])
        if evals and "eval/greedy_accuracy" in evals[0] else None,
        "train": sum(train[-smooth:]) / len(train[-smooth:]) if train else None,
        "pairwise": pairwise, "wall": wall.get("wall_seconds"),
        "state": "finished" if finished else "running or stopped",
        "curves": {"train": [(r["step"], r["reward/accuracy"]) for r in rows
                             if "reward/accuracy" in r],
                   "sampled": [(r["step"], r["eval/sampled_accuracy"]) for r in evals],
                   "greedy": [(r["step"], r["eval/greedy_accuracy"]) for r in evals
                              if "eval/greedy_accuracy" in r]},
    }


def _pair(p) -> str:
    return "-" if p is None else f"{p[0]:.3f} -> {p[1]:.3f}"


def _num(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def table(runs: list[dict], smooth: int = 10) -> str:
    """The markdown table across runs."""
    lines = [f"| run | job | steps | held-out sampled | held-out greedy | train acc (last "
             f"{smooth}) | RM pairwise | wall s | state |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        steps = f"{r['steps']}/{r['total']}" if r["total"] is not None else str(r["steps"])
        lines.append(f"| {r['run']} | {r['job']} | {steps} | {_pair(r['sampled'])} | "
                     f"{_pair(r['greedy'])} | {_num(r['train'])} | {_num(r['pairwise'])} | "
                     f"{_num(r['wall'], '.0f')} | {r['state']} |")
    return "\n".join(lines)


def plot(runs: list[dict], out: str, smooth: int = 10) -> None:
    """The curves of every run in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, r in enumerate(runs):
        color = f"C{i % 10}"
        c = r["curves"]
        if c["train"]:
            steps, acc = zip(*c["train"])
            mean = [sum(acc[max(0, j - smooth + 1): j + 1]) / len(acc[max(0, j - smooth + 1):
                                                                     j + 1])
                    for j in range(len(acc))]
            ax.plot(steps, mean, color=color, alpha=0.35, lw=1)
        if c["sampled"]:
            ax.plot(*zip(*c["sampled"]), "o-", color=color, label=f"{r['run']} sampled")
        if c["greedy"]:
            ax.plot(*zip(*c["greedy"]), "s--", color=color, label=f"{r['run']} greedy")
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy (held out: markers; training: faint)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rlvr_jax.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("--out", default="curves.png", help="the PNG to write")
    ap.add_argument("--smooth", type=int, default=10, help="steps in the training mean")
    args = ap.parse_args(argv)
    try:
        runs = [summarize(d, args.smooth) for d in args.runs]
    except NotARun as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _distinct(runs, args.runs)
    print(table(runs, args.smooth))
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        print(f"error: --out {args.out}: no folder {out_dir}", file=sys.stderr)
        return 2
    plot(runs, args.out, args.smooth)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
