#!/usr/bin/env bash
# Run one training run on every worker of a Cloud TPU VM slice (e.g. v5e-16: 4 workers):
#   launch/tpu_pod.sh [--dry-run] TPU_NAME ZONE EXPERIMENT [hydra overrides...]
#   e.g. launch/tpu_pod.sh my-v5e-16 us-west4-a gsm8k_grpo_7b model.path=/mnt/models/qwen7b
#   --dry-run prints the gcloud command it would run, and runs nothing; --help: this text.
# Needs: gcloud with access to the TPU VM; on every worker this repository at REPO (default
# ~/rlvr_jax) with the package installed (pip install -e '.[tpu]'), and the run directory on
# storage every worker sees (RUNS, default REPO/runs: point it at a mounted bucket or NFS; the
# run is RUNS/EXPERIMENT, so one run per experiment there). The same command runs on all
# workers; distributed.num_processes=-1 makes each join the run through jax.distributed, which
# finds the slice's workers itself. A preempted slice sends SIGTERM: the run checkpoints, and
# the same command (on a recreated slice) resumes it.
set -euo pipefail
source "$(dirname "$0")/common.sh"
launcher_args "$0" 12 "$@"
set -- "${ARGS[@]}"
why="usage: launch/tpu_pod.sh [--dry-run] TPU_NAME ZONE EXPERIMENT [overrides...]"
tpu="${1:?$why}"
zone="${2:?$why}"
exp="${3:?$why}"
shift 3
check_experiment "$exp"
repo="${REPO:-~/rlvr_jax}"
runs="${RUNS:-$repo/runs}"
remote="cd $repo && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python -m rlvr_jax.train \
+experiment=$exp distributed.num_processes=-1 hydra.run.dir=$runs/$exp $*"
if [ "$DRY" = 1 ]; then
  echo "# would run (--dry-run: nothing run):"
  printf 'gcloud compute tpus tpu-vm ssh %q --zone %q --worker=all --command %q\n' "$tpu" "$zone" "$remote"
  exit 0
fi
gcloud compute tpus tpu-vm ssh "$tpu" --zone "$zone" --worker=all --command "$remote"
