#!/usr/bin/env bash
# The user's path: what `pip install .` alone installs (no test extras, so no torch and the
# jinja2 it would bring; nothing of this environment's site-packages) runs the documented
# real-checkpoint path: a tiny local Qwen2-family model with a chat template, GSM8K-format
# files, the gsm8k_grpo preset (conf/README.md, "CPU smoke test"). .ci/run runs it in a fresh
# venv before the test suite; locally: bash tests/user_path.sh [PACKAGE_DIR].
set -euo pipefail
pkg=$(cd "${1:-$(dirname "$0")/..}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$pkg" 2> >(grep -v "^WARNING: Location" >&2)
cd "$work"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
"$work/venv/bin/python" -m rlvr_jax.tools.tiny_hf tiny --data gsm 2> tiny.err || {
  cat tiny.err >&2; exit 1; }
if grep "PyTorch was not found" tiny.err; then exit 1; fi  # no library advice on the console
"$work/venv/bin/python" -m rlvr_jax.train +experiment=gsm8k_grpo model.path=tiny \
  task.train_path=gsm/train.jsonl task.test_path=gsm/test.jsonl model.compute_dtype=float32 \
  sampling.max_new_tokens=12 algo.prompts_per_step=2 algo.samples_per_prompt=4 \
  algo.microbatches=1 eval.num_problems=4 eval.sequences_per_batch=4 num_steps=1 \
  verifier.workers=1 logger.progress_bar=false hydra.run.dir=run
test -f run/summary.json
# Evaluate and export the run as documented, with no library advice on the console (torch is
# not installed here: transformers' "PyTorch was not found"; orbax's metadata notes).
"$work/venv/bin/python" -m rlvr_jax.evaluate run --n 2 --num-problems 4 --batch 4 > eval.txt 2>&1
"$work/venv/bin/python" -m rlvr_jax.export run exported > export.txt 2>&1
test -f exported/config.json
if grep -E "PyTorch was not found|_CHECKPOINT_METADATA" eval.txt export.txt; then exit 1; fi
# The optional `tasks` extra's documented path: a mixed-source file (maths, stdin/stdout code,
# MBPP asserts, reasoning-gym rows) routed to its verifiers, one step (conf/README.md, Tasks).
"$work/venv/bin/pip" install -q "$pkg[tasks]" 2> >(grep -v "^WARNING: Location" >&2)
"$work/venv/bin/python" -m rlvr_jax.tools.tiny_hf tiny --mixed mix
"$work/venv/bin/python" -m rlvr_jax.train +experiment=mixed_sources model.path=tiny \
  task.train_path=mix/train.jsonl task.test_path=mix/test.jsonl model.compute_dtype=float32 \
  sampling.max_new_tokens=12 algo.prompts_per_step=4 algo.samples_per_prompt=2 \
  algo.microbatches=1 eval.num_problems=4 eval.sequences_per_batch=4 num_steps=1 \
  verifier.workers=1 logger.progress_bar=false hydra.run.dir=run_mixed
test -f run_mixed/summary.json
echo "user path: 2 passed, 0 failed (pip install . alone ran gsm8k_grpo on a chat-template model; with [tasks], mixed_sources)"
