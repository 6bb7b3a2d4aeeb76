#!/usr/bin/env bash
# Every objective of the table (and the MaxRL / GDPO estimators) on math_grpo, seeds 0-2, each
# seed's arms from one shared warm start; and the same under stale data (two steps
# off-policy, twice the learning rate; each objective's ratio to the sampler, uncorrected:
# how it copes with staleness is what is compared).
# About 2 minutes per run after a seed's warm start (2.5 minutes) on a 2-core CPU.
# Usage: bash experiments/objectives/run.sh [OUT_DIR] [fresh|stale|both] [SEEDS]
#        python experiments/objectives/compare.py OUT_DIR/fresh   (the tables)
set -euo pipefail
out=${1:-runs/objectives}
which=${2:-both}
seeds=${3:-"0 1 2"}
declare -A ARMS=(
  [clip]="algo.loss.kind=clip"
  [gspo]="algo.loss.kind=gspo"
  [cispo]="algo.loss.kind=cispo"
  [sapo]="algo.loss.kind=sapo"
  [gmpo]="algo.loss.kind=gmpo"
  [kl_cov]="algo.loss.kind=kl_cov"
  [clip_cov]="algo.loss.kind=clip_cov"
  [dppo_tv]="algo.loss.kind=dppo_tv"
  [dppo_kl]="algo.loss.kind=dppo_kl"
  [maxrl]="algo.adv_estimator=maxrl"
  [grpo_format]="+reward.weights.format=0.5"
  [gdpo_format]="algo.adv_estimator=gdpo +reward.weights.format=0.5"
)
ORDER=(clip gspo cispo sapo gmpo kl_cov clip_cov dppo_tv dppo_kl maxrl grpo_format gdpo_format)
run() {  # condition, seed, arm, extra overrides...
  local cond=$1 seed=$2 arm=$3
  shift 3
  local dir="$out/$cond/${arm}_seed$seed"
  [ -f "$dir/summary.json" ] && return 0  # finished: rerunning the script continues
  # shellcheck disable=SC2086
  python -m rlvr_jax.train +experiment=math_grpo "seed=$seed" logger=disabled \
    logger.progress_bar=false "warmup.shared_dir=$out/warm" ${ARMS[$arm]} "$@" \
    "hydra.run.dir=$dir"
}
for seed in $seeds; do
  for arm in "${ORDER[@]}"; do
    if [ "$which" != stale ]; then run fresh "$seed" "$arm"; fi
    if [ "$which" != fresh ]; then
      run stale "$seed" "$arm" rollout.off_policy_steps=2 algo.optim.learning_rate=6e-4
    fi
  done
done
