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
minimum, for the presets that compute in bfloat16; the update's positions, each prompt G
times against once. Not measured here: the compiled decode step's own traffic (gpu.py, on a
GPU).
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax import perf
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
    once per call, `models.policy.for_compute`) with 1, 4 and 8 phases of filled-slot
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


def update_positions_table(names) -> None:
    """The update's forward and backward run over every row's L + R positions: each prompt's
    L positions G times. Counted from shapes: the positions computed per step now, with each
    prompt once (P x L + B x R), and the waste's share (issue 29 item 5, not built yet)."""
    print("\n| preset | update positions per step: now | each prompt once | repeated share |")
    print("|---|---|---|---|")
    for name in names:
        c = CASES[name]
        b = c.prompts * c.group
        now = b * (c.prompt_len + c.response_len)
        once = c.prompts * c.prompt_len + b * c.response_len
        print(f"| {name} | {now:,} | {once:,} | {1 - once / now:.1%} |")


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
    update_positions_table(args.cases.split(","))
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
