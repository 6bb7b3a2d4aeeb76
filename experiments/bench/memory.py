"""Compile-time memory and FLOPs of the RL update step at real model shapes, nothing allocated.

    python experiments/bench/memory.py [--model qwen2.5-0.5b] [--micro 8,64] [--tokens 256,512]

The update step (`train_step.make_rl_step`, KL to the reference on, so the reference forward is
in it too) is lowered and compiled on this machine's CPU backend with abstract inputs
(`jax.ShapeDtypeStruct`): XLA's `memory_analysis()` gives the arguments, outputs and
temporaries one device needs, `cost_analysis()` the FLOPs. Each shape is compiled twice in the
same run: as the code stood before issue 17 (every activation kept, whole-vocabulary logits)
and with rematerialised blocks and the head in token chunks (`model.remat`,
`model.logits_chunk_tokens`). CPU compiles plan memory like a GPU compile only roughly (fusion
and layout choices differ), so the numbers are estimates of the same program, not GPU
measurements. A 24-layer 0.5B step takes ~1-2 minutes to compile on two cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import optax

from rlvr_jax import optim, sharding, train_step
from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.types import TrainBatch

SHAPES = {  # HF config.json values of the Qwen2.5 family
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14,
                         num_kv_heads=2, intermediate_size=4864, qkv_bias=True,
                         tie_embeddings=True, rope_theta=1e6),
    "qwen2.5-1.5b": dict(vocab_size=151936, hidden_size=1536, num_layers=28, num_heads=12,
                         num_kv_heads=2, intermediate_size=8960, qkv_bias=True,
                         tie_embeddings=True, rope_theta=1e6),
    "qwen2.5-7b": dict(vocab_size=152064, hidden_size=3584, num_layers=28, num_heads=28,
                       num_kv_heads=4, intermediate_size=18944, qkv_bias=True,
                       tie_embeddings=False, rope_theta=1e6),
}
GB = 1e9


def analyse(cfg: ModelConfig, micro: int, prompt: int, response: int) -> dict:
    """Memory (bytes) and FLOPs of one update over one microbatch of `micro` sequences."""
    model = Decoder(cfg, cfg.vocab_size)
    tx = optax.adamw(1e-6)
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    params = jax.eval_shape(lambda: {"policy": init_params(model, jax.random.key(0))})
    state = jax.eval_shape(lambda p: optim.init_train_state(p, tx), params)
    t = prompt + response
    f32, i32 = jnp.float32, jnp.int32
    batch = TrainBatch(jax.ShapeDtypeStruct((micro, t), i32), jax.ShapeDtypeStruct((micro, t), i32),
                       *(jax.ShapeDtypeStruct((micro, response), f32) for _ in range(3)))
    step = train_step.make_rl_step(
        model, tx, optax.constant_schedule(1e-6), prompt_len=prompt, temperature=1.0,
        loss=train_step.LossOptions(kl_coef=0.001), state_sharding=sharding.state_shardings(
            state, mesh), metrics_sharding=sharding.replicated(mesh))
    t0 = time.perf_counter()
    compiled = step.lower(state, params["policy"], batch, jax.random.key(0), 1.0).compile()
    seconds = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return {"args": mem.argument_size_in_bytes, "out": mem.output_size_in_bytes,
            "temp": mem.temp_size_in_bytes, "flops": cost.get("flops", float("nan")),
            "compile_s": seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--micro", default="8,64", help="sequences per microbatch, comma-separated")
    ap.add_argument("--tokens", default="256,512", help="prompt,response tokens")
    ap.add_argument("--chunk", type=int, default=128, help="logits_chunk_tokens of the new path")
    ap.add_argument("--remat", default="full", choices=["full", "dots"])
    args = ap.parse_args()
    prompt, response = (int(x) for x in args.tokens.split(","))
    base = ModelConfig(name=args.model, param_dtype="float32", compute_dtype="bfloat16",
                       init_std=0.02, **SHAPES[args.model])
    variants = {"before (no remat, whole logits)": base,
                f"remat={args.remat}, logits in chunks of {args.chunk}": dataclasses.replace(
                    base, remat=args.remat, logits_chunk_tokens=args.chunk)}
    print(f"{args.model}: update step, bfloat16 compute, float32 params + AdamW, KL on; "
          f"{prompt} prompt + {response} response tokens; one device (compile-only)")
    print("| sequences / microbatch | path | arguments GB | temporaries GB | total GB "
          "| GFLOP | compile s |")
    print("|---|---|---|---|---|---|---|")
    for micro in (int(m) for m in args.micro.split(",")):
        rows = {name: analyse(cfg, micro, prompt, response) for name, cfg in variants.items()}
        before = next(iter(rows.values()))
        for name, r in rows.items():
            total = r["args"] + r["out"] + r["temp"]
            ratio = "" if r is before else (
                f" ({total / (before['args'] + before['out'] + before['temp']):.2f}x)")
            print(f"| {micro} | {name} | {r['args'] / GB:.1f} | {r['temp'] / GB:.1f} | "
                  f"{total / GB:.1f}{ratio} | {r['flops'] / 1e9:,.0f} | {r['compile_s']:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
