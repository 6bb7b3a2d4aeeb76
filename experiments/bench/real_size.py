"""Two real RL steps of a Qwen2.5-0.5B-shaped policy on this CPU, peak RSS beside the
compile-time prediction.

    python experiments/bench/real_size.py [--prompts 2] [--samples 2] [--new-tokens 32]

The policy has Qwen2.5-0.5B's shapes (24 layers, hidden 896, the real 151936-word vocabulary,
float32 master weights, bfloat16 compute, remat and chunked logits as the qwen2_5_0p5b preset
sets them), randomly initialised: the weights cannot be downloaded here. It trains on the
procedural arithmetic task (no warm start) through the same entry point as any run
(`rlvr_jax.compose` + `rlvr_jax.run`): sample, verify, advantages, update with KL to the
reference, checkpoint, evaluate. Reported: each jitted function's compile count, wall time,
and the process's peak RSS; then, after the run (so its compiles do not count in the RSS), the
update step and the sampler at the run's exact shapes are compiled with abstract inputs and
XLA's memory analysis is printed as the prediction of what the devices hold. RSS also holds
the Python process, XLA's compiled code, host copies (checkpoint writes, evaluation), so it is
the prediction plus an overhead that this run measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import tempfile
import time

GB = 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import optax

    import rlvr_jax
    from rlvr_jax import build, optim, sharding, train_step
    from rlvr_jax.build import reference_params
    from rlvr_jax.models.policy import Decoder, init_params
    from rlvr_jax.sampling import make_sampler
    from rlvr_jax.types import TrainBatch

    run_dir = tempfile.mkdtemp(prefix="real_size_")
    overrides = ["+experiment=math_grpo", "warmup.steps=0",
                 f"num_steps={args.steps}", f"algo.prompts_per_step={args.prompts}",
                 f"algo.samples_per_prompt={args.samples}", "algo.microbatches=1",
                 f"sampling.max_new_tokens={args.new_tokens}", "algo.loss.kl_coef=0.001",
                 "eval.num_problems=2", "eval.sampled_per_problem=1",
                 f"eval.sequences_per_batch={args.prompts * args.samples}",
                 "logger.progress_bar=false"]
    cfg = rlvr_jax.compose(overrides, run_dir=run_dir)
    # The preset's model, randomly initialised at Qwen2.5-0.5B's shapes and real vocabulary
    # (a config refuses a pretrained size without model.path: this bench means it).
    qwen = rlvr_jax.compose(["model=qwen2_5_0p5b", "model.path=/nonexistent"]).model
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(qwen, path=""))
    t0 = time.perf_counter()
    summary = rlvr_jax.run(cfg)
    wall = time.perf_counter() - t0
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    steps = [r for r in rows if "reward/mean" in r]

    # The prediction: the same two programs at the run's shapes, compiled from abstract inputs.
    m = cfg.model
    model = Decoder(m, m.vocab_size)
    tx = optax.adamw(1e-6)
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    params = jax.eval_shape(lambda: {"policy": init_params(model, jax.random.key(0))})
    state = jax.eval_shape(lambda p: optim.init_train_state(p, tx), params)
    b = args.prompts * args.samples
    t_prompt = build.task_setup(cfg.task, cfg.model, args.new_tokens,
                                os.path.join(run_dir, "tokenizer")).prompt_len
    t = t_prompt + args.new_tokens
    sds = jax.ShapeDtypeStruct
    batch = TrainBatch(sds((b, t), jnp.int32), sds((b, t), jnp.int32),
                       *(sds((b, args.new_tokens), jnp.float32) for _ in range(3)))
    step = train_step.make_rl_step(
        model, tx, optax.constant_schedule(1e-6), prompt_len=t_prompt, temperature=1.0,
        loss=train_step.LossOptions(kl_coef=0.001), state_sharding=sharding.state_shardings(
            state, mesh), metrics_sharding=sharding.replicated(mesh))
    ref = jax.eval_shape(lambda p: reference_params(p, m.compute_dtype), params["policy"])
    upd = step.lower(state, ref, batch, jax.random.key(0), 1.0).compile()
    sample = make_sampler(model, max_new_tokens=args.new_tokens, eos_id=1, pad_id=0,
                          temperature=1.0)
    prompt = sds((b, t_prompt), jnp.int32)
    smp = sample.lower(params["policy"], prompt, prompt, jax.random.key(0)).compile()

    def total(c):
        mem = c.memory_analysis()
        return (mem.argument_size_in_bytes + mem.output_size_in_bytes
                - mem.alias_size_in_bytes + mem.temp_size_in_bytes)

    print(f"Qwen2.5-0.5B shapes, {b} sequences x ({t_prompt} + {args.new_tokens}) tokens, "
          f"{args.steps} RL steps, {jax.default_backend()}")
    print(f"compiles: {summary['compiles'] if 'compiles' in summary else summary}")
    step_s = ", ".join(f"{r['time/step_s']:.1f}" for r in steps)
    mfu = ", ".join(f"{r.get('perf/mfu_update', float('nan')):.3f}" for r in steps)
    print(f"wall {wall:.0f} s; step times {step_s} s; MFU of the update {mfu}")
    print("| | GB |")
    print("|---|---|")
    print(f"| predicted: update step (state + ref + temporaries) | {total(upd) / GB:.2f} |")
    print(f"| predicted: sampler | {total(smp) / GB:.2f} |")
    print(f"| measured: process peak RSS | {peak_rss / GB:.2f} |")


if __name__ == "__main__":
    main()
