"""Where a streamed rollout's device time goes, by piece, and what a resume costs: a released
row's episode (or a carried one under new params) comes back with its history prefilled
again (`turn_sampler.resume`). The baseline prefills the whole response budget R in one
piece (`resume_columns` = R, what every resume cost before); the others prefill the record
in chunks of that many columns, only as many as the longest history needs.

    python experiments/bench/resume.py [--hidden 128 --layers 4 --rows 16 --new-tokens 384]

The streaming bench's model and episodes (experiments/bench/streaming.py: a random model
whose call marker and EOS are made likely, a world per episode answering at once), rows
released on a call, late calls deferred. Each piece is timed to completion (so the pieces
do not overlap here: the sum is the device's share of the wall time). Every arm's episodes
must equal the baseline's.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from anywhere

from experiments.bench.streaming import Worlds, setup  # noqa: E402
from rlvr_jax import episodes, streaming  # noqa: E402
from rlvr_jax.turn_sampler import make_turn_sampler  # noqa: E402

PIECES = ("prompts", "insert", "decode", "extend", "resume")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=128)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--insert", type=int, default=4)
    ap.add_argument("--chunk", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=384)
    ap.add_argument("--max-turns", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--call-boost", type=float, default=2.2)
    ap.add_argument("--eos-boost", type=float, default=0.5)
    ap.add_argument("--columns", default="0,64,32", help="resume_columns per arm (0: R)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs after a compile")
    args = ap.parse_args()
    tok, model, params, prompt, pmask, contexts = setup(args)
    glue = episodes.Glue.of(tok, "[", "]")
    schedule = streaming.Schedule(args.rows, args.insert, args.chunk, 0, 8, release=True,
                                  defer=True)
    print(f"{args.episodes} episodes, {args.rows} rows released on a call, chunks of "
          f"{args.chunk} steps, R = {args.new_tokens}; ms are medians over {args.repeats} "
          "runs\n")
    print("| resume_columns | wall s | resumes | ms a resume | resume s | decode s | "
          "other pieces s | host s | recomputed tokens / episode | episodes equal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = None
    for c in (int(x) or args.new_tokens for x in args.columns.split(",")):
        s = make_turn_sampler(model, max_new_tokens=args.new_tokens, observation_tokens=16,
                              eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                              stops=[tok.encode("#", add_special_tokens=False)],
                              temperature=1.0, group_size=args.group, prompt_len=8,
                              resume_columns=c)
        spent, calls = collections.defaultdict(list), collections.Counter()

        def timed(name, fn):
            def run(*x):
                t0 = time.perf_counter()
                out = jax.block_until_ready(fn(*x))
                spent[name][-1] += time.perf_counter() - t0
                calls[name] += 1
                return out
            return run

        s = s._replace(**{k: timed(k, getattr(s, k)) for k in PIECES})
        walls, made = [], None
        for r in range(args.repeats + 1):  # the first compiles
            for k in PIECES:
                spent[k].append(0.0)
            t0 = time.perf_counter()
            made = streaming.run(s, Worlds(), tok, glue, params, prompt, pmask,
                                 jax.random.key(1), max_turns=args.max_turns,
                                 put=jnp.asarray, schedule=schedule, group_size=args.group,
                                 contexts=contexts)
            walls.append(time.perf_counter() - t0)
        med = lambda xs: float(np.median(xs[1:] or xs))
        wall, resume, decode = med(walls), med(spent["resume"]), med(spent["decode"])
        other = sum(med(spent[k]) for k in PIECES if k not in ("resume", "decode"))
        n = calls["resume"] // (args.repeats + 1)
        base = base or made
        same = all(np.array_equal(getattr(made.rollout, f), getattr(base.rollout, f))
                   for f in ("tokens_B_R", "mask_B_R", "loss_mask_B_R"))
        label = f"{c} (R: the whole budget)" if c == args.new_tokens else str(c)
        print(f"| {label} | {wall:.2f} | {n} | {1e3 * resume / max(n, 1):.1f} | "
              f"{resume:.2f} | {decode:.2f} | {other:.2f} | "
              f"{wall - resume - decode - other:.2f} | "
              f"{made.stats['stream/recomputed_tokens_per_episode']:.1f} | {same} |",
              flush=True)


if __name__ == "__main__":
    main()
