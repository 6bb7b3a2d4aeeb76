"""The multi-turn decode step (turn_sampler.py: every row at its own column, the one the
streamed, lock-step multi-turn and continuous-evaluation samplers all run) against the
one-turn sampler's decode step (sampling.py: every row at one shared slot), timed side by
side: ms per decode step and tokens/s at the same rows, prompt and budget.

    python experiments/bench/turn_decode.py [--model small] [--rows 64] [--repeats 3]

Random weights, temperature 1, no EOS and no call marker the model can emit, so every row
decodes the whole budget in one chunk of `--new-tokens` steps (the multi-turn sampler's
chunk loop, the one-turn sampler's decode loop; prefill excluded from both: the one-turn
sampler's time is its rollout minus a prefill-only call). `--model qwen0p5b`: Qwen2.5-0.5B's
shapes (bfloat16 compute), for an accelerator.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.sampling import make_sampler
from rlvr_jax.turn_sampler import make_turn_sampler

SIZES = {"qwen0p5b": dict(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14,
                          num_kv_heads=2, intermediate_size=4864, qkv_bias=True,
                          tie_embeddings=True, compute_dtype="bfloat16"),
         "small": dict(vocab_size=512, hidden_size=256, num_layers=4, num_heads=4,
                       num_kv_heads=2, intermediate_size=512, compute_dtype="float32"),
         "toy": dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                     intermediate_size=64, compute_dtype="float32")}  # tests/test_bench.py


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="small", choices=sorted(SIZES))
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = ModelConfig(**SIZES[args.model])
    model = Decoder(cfg, cfg.vocab_size)
    params = jax.jit(lambda k: init_params(model, k))(jax.random.key(0))
    b, l, r = args.rows, args.prompt, args.new_tokens
    prompt = jax.random.randint(jax.random.key(1), (b, l), 2, cfg.vocab_size)
    mask = jnp.ones((b, l), jnp.int32)
    never = cfg.vocab_size  # an id no row can sample: no EOS, no call
    turn = make_turn_sampler(model, max_new_tokens=r, observation_tokens=16, eos_id=never,
                             pad_id=0, stops=[[never]], temperature=1.0, prompt_len=l)
    one = make_sampler(model, max_new_tokens=r, eos_id=never, pad_id=0, temperature=1.0)
    prefill = make_sampler(model, max_new_tokens=1, eos_id=never, pad_id=0, temperature=1.0)

    def turn_decode():
        state = jax.block_until_ready(turn.start(params, prompt, mask, jax.random.key(2)))
        t0 = time.perf_counter()
        jax.block_until_ready(turn.decode(params, state, jnp.int32(r)))
        return time.perf_counter() - t0

    def timed(fn):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(params, prompt, mask, jax.random.key(2)))
        return time.perf_counter() - t0

    first = [turn_decode(), timed(one), timed(prefill)]  # compiles
    runs = {"turn": [], "one": [], "prefill": []}
    for _ in range(args.repeats):
        runs["turn"].append(turn_decode())
        runs["one"].append(timed(one))
        runs["prefill"].append(timed(prefill))
    med = {k: statistics.median(v) for k, v in runs.items()}
    one_decode = max(med["one"] - med["prefill"], 1e-9)
    steps = {"one": r - 1, "turn": r}
    print(f"{args.model}, {b} rows, {l} + {r} tokens, {jax.default_backend()} "
          f"({jax.devices()[0].device_kind}); first calls (compile) {first[0]:.1f} / "
          f"{first[1]:.1f} s; {args.repeats} alternating repeats")
    print("| decode loop | ms per step | tokens/s | vs one-turn |")
    print("|---|---|---|---|")
    for name, label, s in (("one", "one-turn sampler (shared slot)", one_decode),
                           ("turn", "multi-turn sampler (a column per row)", med["turn"])):
        per = s / steps[name]
        print(f"| {label} | {per * 1e3:.2f} | {b / per:,.0f} | "
              f"{per / (one_decode / steps['one']):.2f}x |")


if __name__ == "__main__":
    main()
