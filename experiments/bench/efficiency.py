"""Work the rollout does per shipped preset, counted (not timed): what transfers to an
accelerator. For each preset's shapes the sampler is traced with abstract inputs (nothing is
allocated or compiled) and its matmul FLOPs counted on the jaxpr (rlvr_jax/perf.py), with
each prompt prefilled for every row (the baseline, `group_size=1`, measured in the same run)
and once per prompt (`group_size=G`, what the RL loop runs since issue 29).

    python experiments/bench/efficiency.py [--cases math_grpo,gsm8k_grpo]

Columns: the prefill's FLOPs (all rows), the whole rollout's at the full response length
(prefill + R - 1 decode forwards), and the prefill's share of the rollout. A second table:
evaluation's useful row-steps on long-tailed lengths, static batches against continuous
batching (rlvr_jax/continuous.py's own schedule, simulated on the lengths). Between them,
the bytes the decode steps read (weights and attended cache slots, from shapes) against the
minimum, for the presets that compute in bfloat16; the update's positions and FLOPs, each
prompt G times against once (`algo.share_prompts`); then the update padded against packed
(`algo.pack`): positions per real token and counted FLOPs. Not measured here: the compiled
decode step's own traffic (gpu.py, on a GPU).
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax import packing, perf, train_step
from rlvr_jax.continuous import simulate_steps
from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.sampling import make_sampler, phase_ends

QWEN_0P5B = dict(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14,
                 num_kv_heads=2, intermediate_size=4864, qkv_bias=True, tie_embeddings=True,
                 rope_theta=1e6, compute_dtype="bfloat16")
TINY = dict(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384,
            tie_embeddings=True)


class Case(NamedTuple):
    model: dict
    vocab: int
    prompts: int  # P per sampler call (the step's prompts / verifier.overlap_chunks)
    group: int  # G
    prompt_len: int  # L
    response_len: int  # R


CASES = {  # the presets' shapes (prompt slots as their tasks report them)
    "math_grpo": Case(TINY, 97, 64, 8, 6, 5),
    "calc_agent": Case(TINY, 97, 16, 8, 8, 64),
    "gym_mix": Case(TINY, 97, 8, 8, 97, 24),
    "gsm8k_grpo": Case(QWEN_0P5B, 151936, 32, 8, 256, 512),
}


def rollout_flops(case: Case, group_size: int) -> tuple[float, float]:
    """(prefill FLOPs, rollout FLOPs at the full response length) of one sampler call."""
    model = Decoder(ModelConfig(**case.model), case.vocab)
    params = jax.eval_shape(lambda k: init_params(model, k), jax.random.key(0))
    b = case.prompts * case.group
    sample = make_sampler(model, max_new_tokens=case.response_len, eos_id=1, pad_id=0,
                          temperature=1.0, group_size=group_size)
    sds = jax.ShapeDtypeStruct
    args = (params, sds((b, case.prompt_len), jnp.int32), sds((b, case.prompt_len), jnp.int32),
            jax.random.key(0))
    whole = perf.traced_flops(sample, *args, while_trips=case.response_len - 1)
    no_decode = perf.traced_flops(sample, *args, while_trips=0)
    return no_decode, whole


def eval_useful_fraction(n: int, rows: int, insert_rows: int, cap: int = 512,
                         seed: int = 0) -> tuple[float, float]:
    """(static, continuous) share of decode row-steps that make a token of a real sequence,
    for `n` sequences of lognormal lengths (median 200, p95 500, at most `cap`): static
    batches of `rows` (the last one padded, as evaluation pads it) against continuous
    batching over `rows` rows refilled `insert_rows` at a time (continuous.simulate_steps,
    the sampler's own schedule)."""
    rng = np.random.default_rng(seed)
    sigma = np.log(500 / 200) / 1.6449
    lengths = np.clip(np.round(np.exp(rng.normal(np.log(200), sigma, n))), 1, cap).astype(int)
    made = lengths.sum()
    static = sum(rows * lengths[i:i + rows].max() for i in range(0, n, rows))
    return made / static, made / (rows * simulate_steps(lengths, rows, insert_rows))


def decode_reads(case: Case, phases: int, weight_bytes: int) -> tuple[float, float]:
    """(bytes, minimum bytes) a rollout's R - 1 decode steps read at the full response length:
    each step the weights (`weight_bytes` per read) and the keys and values of the cache slots
    its attention reads, all rows. `phases` as `make_sampler`'s: step i reads the first
    L + e_f - 1 slots of its phase f (1 phase: all L + R). The minimum: the slots filled so
    far, L + i. Counted from shapes (bfloat16 cache)."""
    cfg = ModelConfig(**case.model)
    rows = case.prompts * case.group
    slot = 2 * cfg.num_layers * rows * cfg.num_kv_heads * cfg.resolved_head_dim * 2
    steps, l, r = case.response_len - 1, case.prompt_len, case.response_len
    read = minimum = 0.0
    start = 0
    for end in phase_ends(steps, phases):
        slots = l + r if phases == 1 else l + end - 1
        n = end - start
        read += n * (weight_bytes + slots * slot)
        minimum += sum(weight_bytes + (l + i) * slot for i in range(start, end))
        start = end
    return read, minimum


def weights_bytes(case: Case, dtype_bytes: int) -> int:
    model = Decoder(ModelConfig(**case.model), case.vocab)
    params = jax.eval_shape(lambda k: init_params(model, k), jax.random.key(0))
    return sum(x.size for x in jax.tree.leaves(params)) * dtype_bytes


def reads_table(names) -> None:
    """Decode reads per rollout: float32 params read (and cast) at every step with all slots
    attended (the baseline: the sampler before this round), against bfloat16 weights (cast
    once per call, `models.kv_cache.decode_weights`) with 1, 4 and 8 phases of filled-slot
    attention, each as a ratio to the minimum (compute-dtype weights + filled slots)."""
    print("\n| preset | decode reads GB: f32 weights, all slots (before) | bf16 weights, all "
          "slots | 4 phases | 8 phases | minimum (filled slots) |")
    print("|---|---|---|---|---|---|")
    for name in names:
        c = CASES[name]
        if ModelConfig(**c.model).compute_dtype != "bfloat16":
            continue  # the tiny presets compute in float32: nothing to cast
        w32, w16 = weights_bytes(c, 4), weights_bytes(c, 2)
        base, _ = decode_reads(c, 1, w32)
        cells = [decode_reads(c, f, w16) for f in (1, 4, 8)]
        low = cells[0][1]
        print(f"| {name} | {base / 1e9:.0f} ({base / low:.2f}x) | " + " | ".join(
            f"{x / 1e9:.0f} ({x / low:.2f}x)" for x, _ in cells) + f" | {low / 1e9:.0f} |")


def update_flops(case: Case, group_size: int) -> float:
    """Matmul FLOPs of one gradient of the step's response log-probs (the update's forward
    and backward, attention included) over its B rows: each row's prompt computed (G = 1, the
    baseline) or each group's once (`algo.share_prompts`, G); traced with abstract inputs."""
    model = Decoder(ModelConfig(**case.model), case.vocab)
    params = jax.eval_shape(lambda k: init_params(model, k), jax.random.key(0))
    b, t = case.prompts * case.group, case.prompt_len + case.response_len

    def grad(params, tokens_B_T, mask_B_T):
        logp = lambda p: train_step.response_logp(model, p, tokens_B_T, mask_B_T,
                                                  case.prompt_len, 1.0,
                                                  group_size=group_size)[0]
        return jax.grad(lambda p: jnp.sum(logp(p)))(params)

    sds = jax.ShapeDtypeStruct
    return perf.traced_flops(jax.jit(grad), params, sds((b, t), jnp.int32),
                             sds((b, t), jnp.int32))


def update_table(names) -> None:
    """The update's forward and backward ran over every row's L + R positions, each prompt's
    L positions G times: positions (shapes) and counted FLOPs per step, per row against each
    group's prompt once (issue 29 item 5, `algo.share_prompts`), and the share removed.
    Against the minimum of prompts once: only the last prompt slot, which goes with each row
    (it gives the first response token's hidden state), is still computed G times."""
    print("\n| preset | update positions per step: per row -> prompt once | "
          "update TFLOP (fwd + bwd): per row -> prompt once | removed |")
    print("|---|---|---|---|")
    for name in names:
        c = CASES[name]
        b = c.prompts * c.group
        now = b * (c.prompt_len + c.response_len)
        once = c.prompts * (c.prompt_len - 1) + b * (c.response_len + 1)
        f_rows, f_once = update_flops(c, 1), update_flops(c, c.group)
        print(f"| {name} | {now:,} -> {once:,} ({1 - once / now:.1%} fewer) | "
              f"{f_rows / 1e12:.4g} -> {f_once / 1e12:.4g} | {1 - f_once / f_rows:.1%} |")


def packing_table(name: str, seeds: int = 3) -> None:
    """The update's positions per real token (each group's prompt once + the response spans)
    at a preset's shapes, the issue's long-tailed response lengths (lognormal, median 200,
    p95 500 at R = 512, scaled with R; cut at R) and full prompts: padded per row, padded with each group's prompt once
    (`algo.share_prompts`), and packed (`algo.pack`, rlvr_jax/packing.py's own plan, the
    rows of every microbatch that holds any counted) for a few row sizes and microbatch
    budgets; with the attention score entries (rows x C^2, masked ones included: no kernel
    skips them), against the shared-prompt update's. Mean over `seeds` steps."""
    c = CASES[name]
    median, p95 = c.response_len * 200 / 512, c.response_len * 500 / 512
    b, l, r = c.prompts * c.group, c.prompt_len, c.response_len
    t = l + r
    sigma = np.log(p95 / median) / 1.645
    steps = []
    for seed in range(seeds):
        n = np.minimum(np.ceil(np.random.default_rng(seed).lognormal(np.log(median), sigma, b)),
                       r).astype(int)
        steps.append(((np.arange(t)[None] < l + n[:, None]).astype(np.int32), n))
    real = np.mean([c.prompts * l + n.sum() for _, n in steps])
    mean_len = np.mean([n.mean() for _, n in steps])
    shared = c.prompts * (l - 1) + b * (r + 1)
    shared_att = c.prompts * l * l + b * (r + 1) * (l + r)
    f_rows, f_once = update_flops(c, 1), update_flops(c, c.group)
    print(f"\n| update at {name} shapes (responses: mean {mean_len:.0f} of {r}) | positions "
          "per real token | attention entries | update TFLOP (fwd + bwd) |")
    print("|---|---|---|---|")
    print(f"| padded, per row | {b * t / real:.3f} | {b * t * t / shared_att:.2f}x | "
          f"{f_rows / 1e12:.4g} ({f_rows / f_once:.2f}x) |")
    print(f"| padded, each group's prompt once | {shared / real:.3f} | 1.00x | "
          f"{f_once / 1e12:.4g} (1.00x) |")
    plan = jax.jit(packing.plan, static_argnums=(1, 2, 3))
    for cap, rows in ((2 * t, 4), (3 * t, 2), (4 * t, 2), (4 * t, 4)):
        used = [int(plan(jnp.asarray(m), l, c.group, cap).rows_used) for m, _ in steps]
        micro = np.mean([-(-u // rows) for u in used])
        f = micro * packed_flops(c, rows, cap)
        print(f"| packed, rows of {cap} slots, microbatches of {rows} rows | "
              f"{micro * rows * cap / real:.3f} | {micro * rows * cap * cap / shared_att:.2f}x"
              f" | {f / 1e12:.4g} ({f / f_once:.2f}x) |")


def packed_flops(case: Case, rows: int, capacity: int) -> float:
    """Matmul FLOPs of one packed microbatch's gradient of its response log-probs (forward
    over `rows` x `capacity` slots, the head on every slot), traced with abstract inputs."""
    model = Decoder(ModelConfig(**case.model), case.vocab)
    params = jax.eval_shape(lambda k: init_params(model, k), jax.random.key(0))
    b, r = case.prompts * case.group, case.response_len
    sds = jax.ShapeDtypeStruct
    kc = sds((rows, capacity), jnp.int32)
    micro = packing.Micro(kc, kc, kc, kc, kc, sds((b, r), jnp.int32))

    def grad(params, micro):
        logp = lambda p: packing.logp(model, p, micro, 1.0)[0]
        return jax.grad(lambda p: jnp.sum(logp(p)))(params)

    return perf.traced_flops(jax.jit(grad), params, micro)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    print("| preset | rows (P x G) | L + R | prefill TFLOP: per row -> once per prompt | "
          "rollout TFLOP: before -> after | prefill share before -> after |")
    print("|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        c = CASES[name]
        (pre_b, all_b), (pre_a, all_a) = rollout_flops(c, 1), rollout_flops(c, c.group)
        print(f"| {name} | {c.prompts} x {c.group} | {c.prompt_len} + {c.response_len} | "
              f"{pre_b / 1e12:.4g} -> {pre_a / 1e12:.4g} ({pre_b / pre_a:.2f}x) | "
              f"{all_b / 1e12:.4g} -> {all_a / 1e12:.4g} ({all_b / all_a:.3f}x) | "
              f"{pre_b / all_b:.1%} -> {pre_a / all_a:.1%} |")
    reads_table(args.cases.split(","))
    update_table(args.cases.split(","))
    for name in args.cases.split(","):
        packing_table(name)
    eval_table()


def eval_table() -> None:
    inserts = (4, 8, 16, 32)
    print("\n| held-out sequences | rows | static batches | " + " | ".join(
        f"continuous, insert {m}" for m in inserts) + " |")
    print("|---|---|---|" + "---|" * len(inserts))
    for n, rows in ((1319, 256), (1319, 128), (1319, 64), (500, 64)):
        cells = [eval_useful_fraction(n, rows, m) for m in inserts]
        print(f"| {n} | {rows} | {cells[0][0]:.3f} | " + " | ".join(
            f"{c[1]:.3f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
