#!/usr/bin/env bash
# Synchronous vs one step off-policy (rollout.off_policy_steps=1), seeds 0-2, each seed's arms
# from one shared warm start; then the tables and curves (experiments/async/README.md).
#   code_grpo (sandboxed verification): sync | async, decoupled loss + truncated IS
#     (algo.loss.correction=token) | async, PPO ratio to the sampler with dual clip |
#     async token at half the learning rate. About 35 minutes on a 2-core CPU.
#   calc_agent (multi-turn tool use, calculator in the sandbox): sync | async token | async
#     token at half the learning rate. About 50 minutes.
# Usage: bash experiments/async/run.sh [OUT_DIR]   (bubblewrap installed)
set -euo pipefail
out=${1:-runs/async}
arms() {  # preset, learning rate, output folder
  local preset=$1 lr=$2 dir=$3
  for seed in 0 1 2; do
    common=(+experiment=$preset "seed=$seed" eval.every_steps=10 logger=disabled
            "warmup.shared_dir=$dir/warm")
    async=(rollout.off_policy_steps=1 algo.loss.correction=token)
    python -m rlvr_jax.train "${common[@]}" "hydra.run.dir=$dir/sync_s$seed"
    python -m rlvr_jax.train "${common[@]}" "${async[@]}" "hydra.run.dir=$dir/async_token_s$seed"
    if [ "$preset" = code_grpo ]; then
      python -m rlvr_jax.train "${common[@]}" rollout.off_policy_steps=1 \
        algo.loss.dual_clip_c=3 "hydra.run.dir=$dir/async_dualclip_s$seed"
    fi
    python -m rlvr_jax.train "${common[@]}" "${async[@]}" "algo.optim.learning_rate=$lr" \
      "hydra.run.dir=$dir/async_token_lr_s$seed"
  done
}
arms code_grpo 1.5e-4 "$out/code_grpo"
arms calc_agent 5e-5 "$out/calc_agent"
python experiments/async/compare.py "$out/code_grpo" experiments/async/code_grpo.png
python experiments/async/compare.py "$out/calc_agent" experiments/async/calc_agent.png
