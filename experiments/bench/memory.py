"""Compile-time memory and FLOPs of the RL update and the sampler at real model sizes, per
device, nothing allocated.

    python experiments/bench/memory.py                    # every case below (~15 min, 2 cores)
    python experiments/bench/memory.py --cases gsm8k_0.5b --baseline

Each case is a shipped preset's shapes (model, batch, microbatches, prompt + response tokens,
mesh). Its update step (`train_step.make_rl_step`, KL on, so the reference forward is in it) and
its sampler (`sampling.make_sampler`) are lowered and compiled on this machine's CPU backend
with abstract inputs (`jax.ShapeDtypeStruct`, placed by the sharding rules on 8 fake CPU
devices): XLA's `memory_analysis()` gives what one device holds (arguments, outputs,
temporaries). FLOPs are counted on the jaxpr (rlvr_jax/perf.py; XLA's cost_analysis counts the
scanned layers once); the sampler's at the full response length. `--baseline` also compiles
each update as the preset would be without rematerialisation and with whole-vocabulary logits
(the path before issue 17, layers scanned, every row's prompt computed), and `--per-row` each
update with every row's prompt computed (before issue 29's `algo.share_prompts`), in the same
run. CPU compiles plan memory like a
GPU compile only roughly (fusion and layout choices differ; attention is XLA's unfused one, no
cuDNN flash kernel), so these are estimates of the same program, not GPU measurements.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402
from typing import NamedTuple  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

from rlvr_jax import lora, optim, perf, sharding, train_step  # noqa: E402
from rlvr_jax.config import ModelConfig  # noqa: E402
from rlvr_jax.models.policy import Decoder, init_params  # noqa: E402
from rlvr_jax.sampling import make_sampler  # noqa: E402
from rlvr_jax.types import TrainBatch  # noqa: E402
from rlvr_jax.build import reference_params  # noqa: E402

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


class Case(NamedTuple):
    model: str
    sequences: int  # per RL step: prompts x samples
    microbatches: int
    sample_chunks: int  # sampler calls per step (verifier.overlap_chunks)
    prompt: int
    response: int
    mesh: tuple[int, int, int]  # data, fsdp, model
    preset: str
    lora_rank: int = 0
    group: int = 8  # samples per prompt; the presets compute each group's prompt once


CASES = {  # the presets' settings (conf/experiment/*.yaml)
    "gsm8k_0.5b": Case("qwen2.5-0.5b", 256, 8, 1, 256, 512, (1, 1, 1), "gsm8k_grpo"),
    "gsm8k_1.5b": Case("qwen2.5-1.5b", 256, 8, 1, 256, 512, (1, 1, 1), "gsm8k_grpo, model 1.5B"),
    "gsm8k_1.5b_fsdp8": Case("qwen2.5-1.5b", 256, 4, 1, 256, 512, (1, 8, 1),
                             "gsm8k_grpo, model 1.5B, mesh=fsdp"),
    "gsm8k_7b_fsdp8": Case("qwen2.5-7b", 256, 8, 1, 256, 512, (1, 8, 1), "gsm8k_grpo_7b"),
    "gsm8k_7b_fsdp4_tp2": Case("qwen2.5-7b", 256, 8, 1, 256, 512, (1, 4, 2),
                               "gsm8k_grpo_7b mesh.fsdp=4 mesh.model=2"),
    "gsm8k_7b_lora_fsdp8": Case("qwen2.5-7b", 256, 8, 1, 256, 512, (1, 8, 1),
                                "gsm8k_grpo_7b model.lora_rank=16", lora_rank=16),
}


def model_cfg(name: str, remat: str, chunk: int, lora_rank: int = 0) -> ModelConfig:
    return ModelConfig(name=name, param_dtype="float32", compute_dtype="bfloat16",
                       init_std=0.02, remat=remat, logits_chunk_tokens=chunk,
                       lora_rank=lora_rank, **SHAPES[name])


def _mesh(case: Case):
    n = case.mesh[0] * case.mesh[1] * case.mesh[2]
    return sharding.make_mesh(*case.mesh, devices=jax.devices()[:n])


def _memory(compiled) -> dict:
    mem = compiled.memory_analysis()
    return {"args": mem.argument_size_in_bytes, "out": mem.output_size_in_bytes,
            "temp": mem.temp_size_in_bytes, "alias": mem.alias_size_in_bytes}


def analyse_update(case: Case, cfg: ModelConfig, group_size: int, pack: tuple = (0, 0)
                   ) -> dict:
    """Per-device memory and total FLOPs of one update over the step's whole batch
    (`group_size`: UpdateSchedule's; G computes each group's prompt once; `pack`: (rows per
    microbatch, row slots) of the packed update, whose FLOPs are then every microbatch's:
    the empty ones it skips are counted too, see efficiency.py for the work done)."""
    model, mesh = Decoder(cfg, cfg.vocab_size), _mesh(case)
    tx = optax.adamw(1e-6)
    base, adapters = jax.eval_shape(lambda: lora.split(init_params(model, jax.random.key(0))))
    # Trained: the whole policy, or with LoRA its adapters (the base frozen beside them).
    params = {"policy": adapters if cfg.lora_rank else base}
    state = jax.eval_shape(lambda p: optim.init_train_state(p, tx), params)
    state_sh = sharding.state_shardings(state, mesh)
    place = lambda tree, sh: jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, sh)
    rows = sharding.batch_sharding(mesh)
    b, t, r = case.sequences, case.prompt + case.response, case.response
    sds = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=rows)
    batch = TrainBatch(sds((b, t), jnp.int32), sds((b, t), jnp.int32),
                       *(sds((b, r), jnp.float32) for _ in range(3)))
    step = train_step.make_rl_step(
        model, tx, optax.constant_schedule(1e-6), prompt_len=case.prompt, temperature=1.0,
        loss=train_step.LossOptions(kl_coef=0.001),
        schedule=train_step.UpdateSchedule(microbatches=1 if pack[0] else case.microbatches,
                                           group_size=group_size, pack_rows=pack[0],
                                           pack_capacity=pack[1]),
        state_sharding=state_sh, metrics_sharding=sharding.replicated(mesh),
        adapters=cfg.lora_rank > 0)
    # The reference policy as the loop holds it: in the compute dtype (warmstart.py).
    ref = jax.eval_shape(partial(reference_params, compute_dtype=cfg.compute_dtype), base)
    args = (place(state, state_sh), place(ref, sharding.state_shardings(ref, mesh)), batch,
            jax.random.key(0), 1.0)
    t0 = time.perf_counter()
    compiled = step.lower(*args).compile()
    return {**_memory(compiled), "flops": perf.traced_flops(step, *args),
            "compile_s": time.perf_counter() - t0}


def analyse_sampler(case: Case, cfg: ModelConfig) -> dict:
    """Per-device memory of one sampler call (the step's rows / sample_chunks) and its FLOPs
    at the full response length."""
    model, mesh = Decoder(cfg, cfg.vocab_size), _mesh(case)
    params = jax.eval_shape(lambda: init_params(model, jax.random.key(0)))  # with adapters
    if cfg.lora_rank:  # as the loop runs it: the bfloat16 base (the reference) + adapters
        base, adapters = lora.split(params)
        params = lora.merge(jax.eval_shape(partial(reference_params,
                                                   compute_dtype=cfg.compute_dtype), base),
                            adapters)
    param_sh = sharding.state_shardings(params, mesh)
    params = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          params, param_sh)
    rows = case.sequences // case.sample_chunks
    prompt = jax.ShapeDtypeStruct((rows, case.prompt), jnp.int32,
                                  sharding=sharding.batch_sharding(mesh))
    sample = make_sampler(model, max_new_tokens=case.response, eos_id=1, pad_id=0,
                          temperature=1.0)
    t0 = time.perf_counter()
    compiled = sample.lower(params, prompt, prompt, jax.random.key(0)).compile()
    per_row = perf.sampler_flops_per_row(model, params, case.prompt, case.response)
    flops = perf.rollout_flops(per_row, [(rows, case.response - 1)])
    return {**_memory(compiled), "flops": flops, "compile_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--baseline", action="store_true",
                    help="also compile each update without remat and with whole logits")
    ap.add_argument("--chunk", type=int, default=128, help="model.logits_chunk_tokens")
    ap.add_argument("--remat", default="full", choices=["full", "dots"])
    ap.add_argument("--packed", default="", metavar="ROWS,SLOTS",
                    help="also compile each update packed (algo.pack.microbatch_rows, "
                    "algo.pack.row_tokens)")
    ap.add_argument("--per-row", action="store_true",
                    help="also compile each update with every row's prompt computed (G = 1)")
    args = ap.parse_args()
    print("Per device, GB (1e9 bytes): arguments + outputs + temporaries, outputs that alias "
          "donated arguments counted once. bfloat16 compute, float32 params + AdamW, KL on.")
    print("| case | preset | mesh d,f,m | program | args | temp | total | GFLOP (all devices) "
          "| compile s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        case = CASES[name]
        new = model_cfg(case.model, args.remat, args.chunk, case.lora_rank)
        g = case.group
        runs = [("update", f"update remat={args.remat} chunks={args.chunk}, prompt once", new, g)]
        pack = tuple(int(x) for x in args.packed.split(",")) if args.packed else (0, 0)
        if args.packed:
            runs.append(("packed", f"update packed, microbatches of {pack[0]} rows x {pack[1]}"
                         " slots", new, g))
        if args.per_row:
            runs.insert(0, ("update", f"update remat={args.remat} chunks={args.chunk}, per row",
                            new, 1))
        if args.baseline and case.lora_rank:
            runs.insert(0, ("update", "update, full fine-tuning",
                            model_cfg(case.model, args.remat, args.chunk), g))
        elif args.baseline:
            runs.insert(0, ("update", "update, no remat, whole logits, per row",
                            model_cfg(case.model, "none", 0), 1))
        runs.append(("sampler", f"sampler {case.sequences // case.sample_chunks} rows", new, g))
        for kind, label, cfg, group in runs:
            r = (analyse_update(case, cfg, group, pack if kind == "packed" else (0, 0))
                 if kind != "sampler" else analyse_sampler(case, cfg))
            total = r["args"] + r["out"] - r["alias"] + r["temp"]
            print(f"| {name} | {case.preset} | {','.join(map(str, case.mesh))} | "
                  f"{label} ({case.sequences // (case.microbatches if kind == 'update' else 1)}"
                  f" seq x {case.prompt}+{case.response}) | {r['args'] / GB:.1f} | "
                  f"{r['temp'] / GB:.1f} | {total / GB:.1f} | "
                  f"{'see efficiency.py' if kind == 'packed' else format(r['flops'] / 1e9, ',.0f')} | "
                  f"{r['compile_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
