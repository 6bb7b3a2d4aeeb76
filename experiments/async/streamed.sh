#!/usr/bin/env bash
# A multi-turn preset, seeds 0-2, each seed's arms from one shared warm start: episodes in
# lock step | streamed through ROWS decode rows (the same tokens as lock step for the same
# params: the run must be the same run, faster or slower) | streamed and carried across
# updates one step off-policy (decoupled loss with per-token truncated IS). Then the table
# and curves (experiments/async/README.md).
# calc_agent: about 65 minutes on a 2-core CPU; repl_agent (real python_repl sessions,
# bubblewrap): about 60.
# Usage: [EVERY=10] [SEEDS="0 1 2"] [EXTRA="num_steps=20 ..."]
#          bash experiments/async/streamed.sh [PRESET [ROWS [OUT_DIR]]]
#        (defaults: calc_agent, 64 rows; EVERY: steps between held-out evaluations; EXTRA:
#        overrides for every arm)
set -euo pipefail
preset=${1:-calc_agent}
out=${3:-runs/streamed}/$preset
stream=("rollout.stream.rows=${2:-64}")
for seed in ${SEEDS:-0 1 2}; do
  common=("+experiment=$preset" "seed=$seed" "eval.every_steps=${EVERY:-10}" logger=disabled
          "warmup.shared_dir=$out/warm" ${EXTRA:-})
  python -m rlvr_jax.train "${common[@]}" "hydra.run.dir=$out/sync_s$seed"
  python -m rlvr_jax.train "${common[@]}" "${stream[@]}" "hydra.run.dir=$out/streamed_s$seed"
  python -m rlvr_jax.train "${common[@]}" "${stream[@]}" rollout.stream.carry_batches=1 \
    rollout.off_policy_steps=1 algo.loss.correction=token "hydra.run.dir=$out/carried_s$seed"
done
python experiments/async/compare.py "$out" "experiments/async/streamed_$preset.png"
