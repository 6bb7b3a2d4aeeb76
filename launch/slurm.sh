#!/usr/bin/env bash
# Submit one training run to Slurm over NODES nodes x GPUS GPUs:
#   launch/slurm.sh [--dry-run] EXPERIMENT [hydra overrides...]
#   e.g. NODES=2 GPUS=8 launch/slurm.sh gsm8k_grpo_7b model.path=/models/Qwen2.5-7B-Instruct ...
#   --dry-run prints the batch script it would submit, and submits nothing; --help: this text.
# Needs: Slurm (sbatch/srun), this repository on a filesystem every node sees (the run
# directory must be shared too), the package installed (pip install -e '.[cuda]').
# One task per node: each is one JAX process driving its node's GPUs; the processes join one
# run through jax.distributed, which reads the coordinator and ranks from Slurm's environment
# (rlvr_jax/distributed.py). Slurm sends SIGTERM 120 s before the time limit: the run
# checkpoints, and the requeued job (same command) resumes it. Set PARTITION, NODES, GPUS, TIME.
set -euo pipefail
source "$(dirname "$0")/common.sh"
launcher_args "$0" 11 "$@"
set -- "${ARGS[@]}"
exp="${1:?usage: launch/slurm.sh [--dry-run] EXPERIMENT [overrides...]}"; shift
check_experiment "$exp"
script=$(cat <<SBATCH
#!/usr/bin/env bash
#SBATCH --job-name=rlvr-${exp}
#SBATCH --partition=${PARTITION:-gpu}
#SBATCH --nodes=${NODES:-1}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=${GPUS:-1}
#SBATCH --time=${TIME:-04:00:00}
#SBATCH --signal=TERM@120
#SBATCH --requeue
#SBATCH --output=${repo}/runs/slurm/%x-%j.out
cd "${repo}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
srun --kill-on-bad-exit=1 python -m rlvr_jax.train +experiment=${exp} $*
SBATCH
)
if [ "$DRY" = 1 ]; then
  echo "# would submit with sbatch (--dry-run: nothing submitted):"
  echo "$script"
  exit 0
fi
command -v sbatch >/dev/null || { echo "error: sbatch not found (Slurm is needed; --dry-run prints the script)" >&2; exit 2; }
mkdir -p "$repo/runs/slurm"
echo "$script" | sbatch
