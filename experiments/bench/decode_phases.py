"""The sampler with its decode loop in phases (attention over the filled cache slots only,
`sampling.decode_phases`) against one loop over all slots, timed side by side on this CPU.

    python experiments/bench/decode_phases.py [--phases 1,4,8] [--repeats 5]

The small benchmark model (hidden 512, 8 layers, 8/4 heads, random weights, float32) samples
B rows of an L-token prompt for R new tokens at T=1 with no EOS (every row to the full budget),
L:R = 1:2 as gsm8k_grpo's 256 + 512. Runs alternate between the settings after one compile
each; the table gives the first call (trace + compile + run), the median rollout time, its
ratio to one phase, and whether the tokens equal one phase's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.sampling import make_sampler

SIZES = {"small": dict(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4,
                       intermediate_size=1536, tie_embeddings=True),
         "toy": dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                     intermediate_size=64, tie_embeddings=True)}  # tests/test_bench.py


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default="1,4,8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--model", default="small", choices=sorted(SIZES))
    args = ap.parse_args()
    model = Decoder(ModelConfig(**SIZES[args.model]), 512)
    params = init_params(model, jax.random.key(0))
    b, l = args.batch, args.prompt
    prompt = jax.random.randint(jax.random.key(1), (b, l), 2, 512)
    mask = jnp.ones((b, l), jnp.int32)
    settings = [int(x) for x in args.phases.split(",")]
    samplers, first, times, tokens = {}, {}, {f: [] for f in settings}, {}
    for f in settings:
        samplers[f] = make_sampler(model, max_new_tokens=args.new_tokens, eos_id=-1, pad_id=0,
                                   temperature=1.0, phases=f)
        t0 = time.perf_counter()
        tokens[f] = np.asarray(samplers[f](params, prompt, mask, jax.random.key(2)).tokens_B_R)
        first[f] = time.perf_counter() - t0
    for _ in range(args.repeats):
        for f in settings:
            t0 = time.perf_counter()
            jax.block_until_ready(samplers[f](params, prompt, mask, jax.random.key(2)))
            times[f].append(time.perf_counter() - t0)
    base = statistics.median(times[settings[0]])
    print(f"{args.model} model, {b} rows, {l} + {args.new_tokens} tokens, {jax.default_backend()}, "
          f"{args.repeats} alternating repeats")
    print("| phases | first call s | rollout s (median) | vs one loop | same tokens |")
    print("|---|---|---|---|---|")
    for f in settings:
        med = statistics.median(times[f])
        print(f"| {f} | {first[f]:.1f} | {med:.3f} | {base / med:.3f}x | "
              f"{np.array_equal(tokens[f], tokens[settings[0]])} |")


if __name__ == "__main__":
    main()
