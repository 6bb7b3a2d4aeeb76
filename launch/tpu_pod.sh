#!/usr/bin/env bash
# Run one training run on every worker of a Cloud TPU VM slice (e.g. v5e-16: 4 workers):
#   launch/tpu_pod.sh TPU_NAME ZONE EXPERIMENT [hydra overrides...]
#   e.g. launch/tpu_pod.sh my-v5e-16 us-west4-a gsm8k_grpo_7b model.path=/mnt/models/qwen7b
# Needs: gcloud with access to the TPU VM; on every worker this repository at REPO (default
# ~/rlvr_jax) with the package installed (pip install -e '.[tpu]'), and the run directory on
# storage every worker sees (RUNS, default REPO/runs: point it at a mounted bucket or NFS; the
# run is RUNS/EXPERIMENT, so one run per experiment there). The same command runs on all
# workers; distributed.num_processes=-1 makes each join the run through jax.distributed, which
# finds the slice's workers itself. A preempted slice sends SIGTERM: the run checkpoints, and
# the same command (on a recreated slice) resumes it.
set -euo pipefail
tpu="${1:?usage: launch/tpu_pod.sh TPU_NAME ZONE EXPERIMENT [overrides...]}"
zone="${2:?usage: launch/tpu_pod.sh TPU_NAME ZONE EXPERIMENT [overrides...]}"
exp="${3:?usage: launch/tpu_pod.sh TPU_NAME ZONE EXPERIMENT [overrides...]}"
shift 3
repo="${REPO:-~/rlvr_jax}"
runs="${RUNS:-$repo/runs}"
gcloud compute tpus tpu-vm ssh "$tpu" --zone "$zone" --worker=all --command \
  "cd $repo && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python -m rlvr_jax.train \
   +experiment=$exp distributed.num_processes=-1 hydra.run.dir=$runs/$exp $*"
