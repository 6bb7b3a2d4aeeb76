#!/usr/bin/env bash
# Submit one training run to Slurm: launch/slurm.sh EXPERIMENT [hydra overrides...]
#   e.g. launch/slurm.sh math_grpo algo.optim.learning_rate=1e-4
# Single host only for now: the loop places each batch from one process (jax.device_put of a
# host array); multi-host needs per-process batch slices, not written yet. All GPUs of the node
# form the mesh (mesh=auto: data parallel; mesh=fsdp to shard params). Set PARTITION, GPUS, TIME.
set -euo pipefail
exp="${1:?usage: launch/slurm.sh EXPERIMENT [overrides...]}"; shift
repo="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$repo/runs/slurm"
sbatch <<SBATCH
#!/usr/bin/env bash
#SBATCH --job-name=rlvr-${exp}
#SBATCH --partition=${PARTITION:-gpu}
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=${GPUS:-1}
#SBATCH --time=${TIME:-04:00:00}
#SBATCH --output=${repo}/runs/slurm/%x-%j.out
cd "${repo}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
srun python -m rlvr_jax.train +experiment=${exp} $*
SBATCH
