#!/usr/bin/env bash
# Turn-level credit on calc_agent (multi-turn calculator calls, experiments/agentic): the
# episode-level GRPO baseline, GiGPO's step groups (algo.gigpo.weight=1), per-turn rewards
# for failed or malformed calls (env.turn_rewards), and both; each seed's arms from one shared
# warm start. About 12 minutes per arm after the warm start (9) on a 2-core CPU.
# Usage: bash experiments/objectives/turns.sh [OUT_DIR] [SEEDS]
#        python experiments/objectives/compare.py OUT_DIR
set -euo pipefail
out=${1:-runs/objectives/turns}
seeds=${2:-"0"}
penalties=(+env.turn_rewards.tool_error=-0.5 +env.turn_rewards.malformed=-0.5
           +env.turn_rewards.unknown_tool=-0.5)
for seed in $seeds; do
  arm() {  # name, overrides...
    local dir="$out/$1_seed$seed"
    shift
    [ -f "$dir/summary.json" ] || python -m rlvr_jax.train +experiment=calc_agent \
      "seed=$seed" logger=disabled logger.progress_bar=false eval.every_steps=10 \
      "warmup.shared_dir=$out/warm" "$@" "hydra.run.dir=$dir"
  }
  arm episode
  arm gigpo algo.gigpo.weight=1.0
  arm turn_rewards "${penalties[@]}"
  arm gigpo_turn_rewards algo.gigpo.weight=1.0 "${penalties[@]}"
done
