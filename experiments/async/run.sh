#!/usr/bin/env bash
# code_grpo synchronous vs one step off-policy (rollout.off_policy_steps=1), seeds 0-2, each
# pair from one shared warm start; then the table and curves. 2-core CPU with bubblewrap,
# about 75 minutes. Usage: bash experiments/async/run.sh [OUT_DIR]
set -euo pipefail
out=${1:-runs/async}
for seed in 0 1 2; do
  common=(+experiment=code_grpo "seed=$seed" eval.every_steps=10 logger=disabled
          "warmup.shared_dir=$out/warm")
  python -m rlvr_jax.train "${common[@]}" "hydra.run.dir=$out/sync_s$seed"
  python -m rlvr_jax.train "${common[@]}" rollout.off_policy_steps=1 \
    algo.loss.correction=token "hydra.run.dir=$out/async_s$seed"
done
python experiments/async/compare.py "$out" experiments/async
