#!/usr/bin/env bash
# One prepared command for a session lent an accelerator (the `device` tool): the sampler's
# tokens/s and MFU, the update's step time and MFU at the gsm8k_grpo shapes (Qwen2.5-0.5B,
# random weights), predicted vs measured peak memory, one decode step's bytes; one JSON file,
# $OUT/gpu.json (or ./gpu.json). Needs jax with the accelerator's plugin (pip install -e
# '.[cuda]'); ~6 minutes on one H100-class GPU, most of it compiling. At toy sizes on CPU:
# python experiments/bench/gpu.py --toy (tests/test_bench.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-.}"
python -c "import jax; print('devices:', jax.devices())"
# No preallocation: the peak in use is then what the programs need, comparable to the
# compiled update's own estimate.
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 540 python experiments/bench/gpu.py \
  --out "$out/gpu.json"
