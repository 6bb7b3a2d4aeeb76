#!/usr/bin/env bash
# calc_agent (multi-turn tool use, the calculator in the sandbox), seeds 0-2, each seed's arms
# from one shared warm start: episodes in lock step | streamed through 64 decode rows (the
# same tokens as lock step for the same params: the run must be the same run, faster or
# slower) | streamed and carried across updates one step off-policy (decoupled loss with
# per-token truncated IS). Then the table and curves (experiments/async/README.md).
# About 65 minutes on a 2-core CPU.
# Usage: bash experiments/async/streamed.sh [OUT_DIR]   (bubblewrap installed)
set -euo pipefail
out=${1:-runs/streamed}/calc_agent
stream=(rollout.stream.rows=64)
for seed in 0 1 2; do
  common=(+experiment=calc_agent "seed=$seed" eval.every_steps=10 logger=disabled
          "warmup.shared_dir=$out/warm")
  python -m rlvr_jax.train "${common[@]}" "hydra.run.dir=$out/sync_s$seed"
  python -m rlvr_jax.train "${common[@]}" "${stream[@]}" "hydra.run.dir=$out/streamed_s$seed"
  python -m rlvr_jax.train "${common[@]}" "${stream[@]}" rollout.stream.carry_batches=1 \
    rollout.off_policy_steps=1 algo.loss.correction=token "hydra.run.dir=$out/carried_s$seed"
done
python experiments/async/compare.py "$out" experiments/async/streamed_calc_agent.png
