#!/usr/bin/env bash
# One prepared command for a session lent an accelerator (the `device` tool): the sampler's
# tokens/s and MFU, the update's step time and MFU at the gsm8k_grpo shapes (Qwen2.5-0.5B,
# random weights; per row, each prompt once, packed), predicted vs measured peak memory, one
# decode step's bytes; one JSON file, $OUT/gpu.json (or ./gpu.json), written after each
# section. Then the multi-turn decode step against the one-turn sampler's at the same shapes
# (turn_decode.py; $OUT/turn_decode.txt). Needs jax with the accelerator's plugin (pip
# install -e '.[cuda]'). gpu.py took 5 minutes on one H200 (2026-12-04), most of it
# compiling. At toy sizes on CPU: python experiments/bench/gpu.py --toy (tests/test_bench.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-.}"
python -c "import jax; print('devices:', jax.devices())"
# No preallocation: the peak in use is then what the programs need, comparable to the
# compiled update's own estimate.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 420 python experiments/bench/gpu.py --out "$out/gpu.json" || echo "gpu.py: exit $?"
timeout 150 python experiments/bench/turn_decode.py --model qwen0p5b --rows 64 --prompt 128 \
  --new-tokens 256 --repeats 2 | tee "$out/turn_decode.txt"
