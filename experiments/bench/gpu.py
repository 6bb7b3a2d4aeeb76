"""One prepared measurement for a session that is lent an accelerator (issue 29): at the
gsm8k_grpo preset's shapes with random weights (Qwen2.5-0.5B, 32 prompts x 8 samples, 256
prompt + 512 response tokens, bfloat16 compute), on one device:

  * the sampler: generated tokens/s and the rollout's MFU (each prompt prefilled once), and
    with the preset's 4 decode phases (attention over the filled slots; the same tokens);
  * the RL update (GRPO, KL on, 8 microbatches) on responses of the issue-40 lengths
    (lognormal, median 200, p95 500 of 512 tokens): step time and MFU, per row, with each
    group's prompt computed once (`algo.share_prompts`), and packed (`algo.pack`: the
    preset's rows of 1536 slots in microbatches of 4, and rows of 3072 in microbatches of 2);
  * memory: the compiled update's own prediction (arguments + outputs + temporaries, what
    experiments/bench/memory.py reports from a CPU compile) against the device's measured
    peak (`memory_stats`, where the backend has it);
  * one decode step's bytes accessed (XLA's cost analysis of the compiled step) against the
    minimum it must move: the weights and the filled cache once, one slot written.

Writes one JSON file, again after each section (a run stopped at its time limit keeps what
it measured). `--toy` runs the same code at toy sizes (CPU, seconds: what the tests
run). Random weights never emit EOS on purpose, so every row decodes its whole budget: the
worst case of a real rollout.

    bash experiments/bench/gpu.sh                      # on the GPU machine: $OUT/gpu.json
    python experiments/bench/gpu.py --toy --out /tmp/gpu.json
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rlvr_jax import optim, packing, perf, sharding, train_step
from rlvr_jax.config import ModelConfig
from rlvr_jax.models.kv_cache import KVCache, decode_weights
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.models.rope import rope_for
from rlvr_jax.sampling import make_sampler
from rlvr_jax.types import TrainBatch

QWEN_0P5B = dict(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14,
                 num_kv_heads=2, intermediate_size=4864, qkv_bias=True, tie_embeddings=True,
                 rope_theta=1e6)
TOY = dict(vocab_size=64, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
           intermediate_size=128)
SIZES = {"gsm8k_grpo": dict(model=QWEN_0P5B, prompts=32, group=8, prompt=256, response=512,
                            microbatches=8, packs=((4, 1536), (2, 3072))),
         "toy": dict(model=TOY, prompts=2, group=4, prompt=8, response=8, microbatches=2,
                     packs=((2, 32),))}


def timed(fn, *args, repeats: int = 2):
    """(result, best seconds) of `fn(*args)` after one warm-up call (its compile)."""
    out = jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return out, best


def measure(size: str, save) -> dict:
    s = SIZES[size]
    cfg = ModelConfig(param_dtype="float32", compute_dtype="bfloat16", init_std=0.02,
                      remat="full", logits_chunk_tokens=128, **s["model"])
    model = Decoder(cfg, cfg.vocab_size)
    device = jax.devices()[0]
    mesh = sharding.make_mesh(1, 1, 1, devices=[device])
    params = jax.jit(lambda k: init_params(model, k))(jax.random.key(0))
    b, l, r, g = s["prompts"] * s["group"], s["prompt"], s["response"], s["group"]
    rng = np.random.default_rng(0)
    prompt = jnp.asarray(np.repeat(rng.integers(2, cfg.vocab_size, (s["prompts"], l)), g, 0),
                         jnp.int32)
    pmask = jnp.ones((b, l), jnp.int32)
    out = {"size": size, "device": device.device_kind, "platform": device.platform,
           "rows": b, "prompt": l, "response": r}

    # ---------------------------------------------------------------- sampler
    sample = make_sampler(model, max_new_tokens=r, eos_id=-1, pad_id=0, temperature=1.0,
                          group_size=g)
    ref = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)  # as the loop holds it
    rollout, seconds = timed(sample, ref, prompt, pmask, jax.random.key(1))
    tokens = float(np.asarray(rollout.mask_B_R).sum())
    per_row = perf.sampler_flops_per_row(model, ref, l, r)
    flops = perf.rollout_flops(per_row, [(b, r - 1)], group_size=g)
    out["sampler"] = {"seconds": seconds, "tokens_per_s": tokens / seconds,
                      "tflops": flops / 1e12, "mfu": perf.mfu(flops, seconds, [device])}
    save(out)
    # The preset's decode phases (attention over the filled slots only): same tokens, fewer reads.
    phased = make_sampler(model, max_new_tokens=r, eos_id=-1, pad_id=0, temperature=1.0,
                          group_size=g, phases=4)
    rollout4, seconds4 = timed(phased, ref, prompt, pmask, jax.random.key(1))
    out["sampler_4_phases"] = {
        "seconds": seconds4, "tokens_per_s": tokens / seconds4,
        "same_tokens": bool(np.array_equal(np.asarray(rollout4.tokens_B_R),
                                           np.asarray(rollout.tokens_B_R)))}
    save(out)

    # ---------------------------------------------------------------- update
    tx = optax.adamw(1e-6)
    # Long-tailed response lengths (issue 40's: lognormal, median 200 and p95 500 at R = 512,
    # scaled with R, cut at R): what padding wastes and packing removes.
    n_B = np.minimum(np.ceil(rng.lognormal(np.log(r * 200 / 512), np.log(2.5) / 1.645, b)),
                     r).astype(int)
    resp = jnp.asarray(np.arange(r)[None] < n_B[:, None], jnp.float32)
    batch = TrainBatch(jnp.concatenate([prompt, rollout.tokens_B_R * resp.astype(jnp.int32)], 1),
                       jnp.concatenate([pmask, resp.astype(jnp.int32)], 1), resp,
                       rollout.logp_B_R * resp,
                       jnp.asarray(rng.normal(size=(b, 1)), jnp.float32) * resp)
    real = s["prompts"] * l + int(n_B.sum())  # each prompt once + the responses
    out["update_batch"] = {"response_mean": float(n_B.mean()), "response_max": int(n_B.max()),
                           "real_tokens": real}

    def time_update(group_size: int, pack_rows: int = 0, capacity: int = 0):
        """(best of 2 timed calls after a first, FLOPs, compiled-memory prediction, loss,
        positions per real token)."""
        state = optim.init_train_state({"policy": params}, tx)
        step = train_step.make_rl_step(
            model, tx, optax.constant_schedule(1e-6), prompt_len=l, temperature=1.0,
            loss=train_step.LossOptions(kl_coef=0.001),
            schedule=train_step.UpdateSchedule(microbatches=s["microbatches"],
                                               group_size=group_size, pack_rows=pack_rows,
                                               pack_capacity=capacity, prompt_rows=g),
            state_sharding=sharding.state_shardings(jax.eval_shape(lambda: state), mesh),
            metrics_sharding=sharding.replicated(mesh))
        args = (state, ref, batch, jax.random.key(2), 1.0)
        flops = perf.traced_flops(step, *args)
        mem = step.lower(*args).compile().memory_analysis()
        predicted = (mem.argument_size_in_bytes + mem.output_size_in_bytes
                     - mem.alias_size_in_bytes + mem.temp_size_in_bytes)
        t_best, first = float("inf"), None
        for i in range(3):  # the state is donated: each call takes the last one's
            t0 = time.perf_counter()
            state, metrics = jax.block_until_ready(step(state, *args[1:]))
            if i:
                t_best = min(t_best, time.perf_counter() - t0)
            else:
                first = metrics  # the loss at the starting params (the same in every layout)
        return (t_best, flops, predicted, float(first["loss"]),
                float(first.get("update_positions_per_token", float("nan"))))

    t_best, update_flops, predicted, loss, ppt = time_update(1)
    stats = device.memory_stats() or {}
    out["update"] = {"seconds": t_best, "tflops": update_flops / 1e12,
                     "mfu": perf.mfu(update_flops, t_best, [device]), "loss": loss,
                     "positions_per_token": ppt}
    out["memory"] = {"predicted_gb": predicted / 1e9,
                     "measured_peak_gb": (stats["peak_bytes_in_use"] / 1e9
                                          if "peak_bytes_in_use" in stats else None)}
    # Each group's prompt computed once (algo.share_prompts): the same loss, fewer FLOPs.
    save(out)
    t_once, flops_once, predicted_once, loss_once, ppt = time_update(g)
    out["update_prompt_once"] = {"seconds": t_once, "tflops": flops_once / 1e12,
                                 "mfu": perf.mfu(flops_once, t_once, [device]),
                                 "predicted_gb": predicted_once / 1e9, "loss": loss_once,
                                 "positions_per_token": ppt}
    save(out)
    # Packed (algo.pack): MFU counts the packed step's own FLOPs (every slot of the rows it
    # computes, the padding left in them included); `x_prompt_once` is the time against the
    # padded update with each prompt once, the baseline that packing is to beat.
    for rows, cap in s["packs"]:
        t_p, flops_p, predicted_p, loss_p, ppt = time_update(g, rows, cap)
        # The traced step counts every microbatch of its scan; those holding no row are
        # skipped when it runs.
        used = int(packing.plan(batch.input_mask_B_T, l, g, cap).rows_used)
        flops_p *= -(-used // rows) / -(-b // rows)
        out[f"update_packed_{rows}x{cap}"] = {
            "seconds": t_p, "tflops": flops_p / 1e12, "mfu": perf.mfu(flops_p, t_p, [device]),
            "predicted_gb": predicted_p / 1e9, "loss": loss_p, "positions_per_token": ppt,
            "x_prompt_once": t_p / t_once}
        save(out)

    # ---------------------------------------------------------------- one decode step
    slots = l + r
    kv = jax.ShapeDtypeStruct((b, slots, cfg.num_kv_heads, cfg.resolved_head_dim), jnp.bfloat16)
    cache = KVCache((kv,) * cfg.num_layers, (kv,) * cfg.num_layers,
                    jax.ShapeDtypeStruct((b, slots), bool))
    rope = tuple(x[:, 0] for x in rope_for(cfg, jnp.full((b, 1), l, jnp.int32)))  # [B, D/2]
    decode = jax.jit(lambda p, t, c: model.apply({"params": p}, t, jnp.ones_like(t, bool), rope,
                                                 c, l + r // 2, method="decode_step"))
    split = jax.eval_shape(lambda p: decode_weights(p, cfg), ref)  # as the samplers read it
    cost = decode.lower(split, jax.ShapeDtypeStruct((b,), jnp.int32), cache).compile()
    analysis = cost.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    weights = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(ref))
    filled = 2 * cfg.num_layers * b * (l + r // 2) * cfg.num_kv_heads * \
        cfg.resolved_head_dim * 2  # K and V, bfloat16, the slots filled half way through
    out["decode_step"] = {"bytes_accessed_gb": float(analysis.get("bytes accessed", -1)) / 1e9,
                          "minimum_gb": (weights + filled) / 1e9,
                          "cache_gb": 2 * cfg.num_layers * kv.size * 2 / 1e9}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--toy", action="store_true", help="toy sizes (CPU, seconds)")
    ap.add_argument("--out", default="gpu.json")
    args = ap.parse_args()
    def save(result: dict) -> None:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)

    result = measure("toy" if args.toy else "gsm8k_grpo", save)
    save(result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
