#!/usr/bin/env bash
# On-policy distillation (rlvr_jax/distill.py) on math_grpo: a larger tiny teacher (192 wide,
# 6 layers, ~2.7x the student's parameters) trained first with math_grpo, then the default
# tiny student from its own warm start, three arms of the same 100 steps: GRPO alone,
# distillation alone (the teacher's reverse KL as the only reward), and both. Seed 0.
# About 35 minutes on a 2-core CPU (the teacher ~15). TEACHER=clean: the teacher's warm start
# imitates correct demonstrations only (warmup.wrong_fraction=0), for a teacher stronger
# than the student; the students' warm start is the preset's in both.
# Usage: bash experiments/objectives/distill.sh [OUT_DIR] [noisy|clean]
#        python experiments/objectives/compare.py OUT_DIR   (the student arms)
set -euo pipefail
out=${1:-runs/objectives/distill}
common=(+experiment=math_grpo seed=0 logger=disabled logger.progress_bar=false)
teacher="$out/teacher"
teacher_extra=()
[ "${2:-noisy}" = clean ] && teacher_extra=(warmup.wrong_fraction=0)
[ -f "$teacher/summary.json" ] || python -m rlvr_jax.train "${common[@]}" \
  model.hidden_size=192 model.intermediate_size=576 model.num_layers=6 "${teacher_extra[@]}" \
  "hydra.run.dir=$teacher"
arm() {  # name, overrides...
  local dir="$out/$1_seed0"
  shift
  [ -f "$dir/summary.json" ] || python -m rlvr_jax.train "${common[@]}" \
    "warmup.shared_dir=$out/warm" "$@" "hydra.run.dir=$dir"
}
arm grpo
arm distill "distill.teacher=$teacher" +reward.weights.correct=0
arm grpo_distill "distill.teacher=$teacher"
