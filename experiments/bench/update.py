"""Our GRPO update step against a torch step with TRL's GRPO loss, on the same weights, side
by side on this CPU; and our step's variants, to find where the gap is (issue 29 item 8).

    python experiments/bench/update.py [--repeats 5] [--batch 64] [--model small]

One update on B rows of L = 16 prompt + R = 32 response tokens (random tokens, prompts in groups
of G = 8 rows as an RL step's are, every response token in the loss, random advantages, sampler log-probs equal to the current policy's): ours
is `train_step.make_rl_step` (clipped ratio, token-mean, AdamW through optax) on one CPU
device; torch's is what TRL's GRPOTrainer computes for a batch (transformers' model on our
exported weights, logits at the response positions / temperature, log-softmax gather,
exp(logp - old) clipped at 0.2 / 0.28, token mean, backward, torch AdamW step), written out
here so that no trainer object, dataset or generation is involved. Ours runs in variants: scanned
layers with no remat (the small model's setting before issue 29) or with `model.remat=dots`
(its setting now), the layers unrolled, full remat, the head in chunks
(`model.logits_chunk_tokens`), each group's prompt computed once (`algo.share_prompts`, with
remat dots): each row's time against the first row's. Runs alternate after one warm-up each.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
import transformers

from rlvr_jax import optim, sharding, train_step
from rlvr_jax.config import ModelConfig
from rlvr_jax.models import hf
from rlvr_jax.models import policy as policy_lib
from rlvr_jax.types import TrainBatch

SIZES = {"small": dict(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4,
                       intermediate_size=1536),
         "toy": dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                     intermediate_size=64)}  # tests/test_bench.py
VOCAB, L, R, G, LR = 512, 16, 32, 8, 1e-5


def batch(b: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, VOCAB, size=(b, L + R)).astype(np.int32)
    tokens[:, :L] = np.repeat(tokens[::G, :L], G, axis=0)  # P_G order: G rows per prompt
    adv = np.repeat(rng.normal(size=(b, 1)), R, axis=1).astype(np.float32)
    return tokens, adv


def ours(cfg: ModelConfig, params, tokens, adv, unroll: bool = False, group_size: int = 1):
    """A callable running one of our updates (compiled on the first call)."""
    model = policy_lib.Decoder(cfg, VOCAB)
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    tx = optax.adamw(LR, weight_decay=0.0)
    state = optim.init_train_state({"policy": params}, tx)
    b = tokens.shape[0]
    logp = train_step.response_logp(model, params, jnp.asarray(tokens),
                                     jnp.ones((b, L + R), jnp.int32), L, 1.0)[0]
    data = TrainBatch(jnp.asarray(tokens), jnp.ones((b, L + R), jnp.float32),
                      jnp.ones((b, R), jnp.float32), logp, jnp.asarray(adv))
    scan = jax.lax.scan
    patch = (mock.patch.object(policy_lib.jax.lax, "scan",
                               lambda f, init, xs, **kw: scan(f, init, xs, unroll=True))
             if unroll else mock.patch.object(policy_lib.jax.lax, "scan", scan))
    with patch:
        step = train_step.make_rl_step(
            model, tx, optax.constant_schedule(LR), prompt_len=L, temperature=1.0,
            loss=train_step.LossOptions(eps_low=0.2, eps_high=0.28),
            schedule=train_step.UpdateSchedule(group_size=group_size),
            state_sharding=sharding.state_shardings(jax.eval_shape(lambda: state), mesh),
            metrics_sharding=sharding.replicated(mesh))
        compiled = step.lower(state, {}, data, jax.random.key(0), 1.0).compile()
    holder = {"state": state}

    def run():
        t0 = time.perf_counter()
        holder["state"], m = compiled(holder["state"], {}, data, jax.random.key(0), 1.0)
        jax.block_until_ready(m)
        return time.perf_counter() - t0
    return run


def torch_grpo(model, tokens, adv):
    """One update as TRL's GRPO loss computes it (its defaults: eps 0.2 / 0.28, token mean)."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    ids = torch.tensor(tokens, dtype=torch.long)
    target = ids[:, L:]
    advantages = torch.tensor(adv)
    with torch.no_grad():
        old = torch.log_softmax(model(input_ids=ids).logits[:, L - 1:-1], -1).gather(
            -1, target[..., None])[..., 0]

    def run():
        t0 = time.perf_counter()
        logits = model(input_ids=ids).logits[:, L - 1:-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, target[..., None])[..., 0]
        ratio = torch.exp(logp - old)
        loss = -torch.min(ratio * advantages,
                          torch.clamp(ratio, 1 - 0.2, 1 + 0.28) * advantages).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return time.perf_counter() - t0
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--model", default="small", choices=sorted(SIZES))
    args = ap.parse_args()
    base = dict(vocab_size=VOCAB, tie_embeddings=False, qkv_bias=True, init_std=0.02,
                **SIZES[args.model])
    cfg = ModelConfig(name=args.model, **base)
    params = init = policy_lib.init_params(policy_lib.Decoder(cfg, VOCAB), jax.random.key(0))
    tokens, adv = batch(args.batch)
    with tempfile.TemporaryDirectory() as d:
        hf.save(d, jax.tree.map(np.asarray, params), cfg, "qwen2")
        hf_model = transformers.AutoModelForCausalLM.from_pretrained(d)
    copy = lambda: jax.tree.map(jnp.array, init)
    with_ = lambda **kw: ModelConfig(name=args.model, **base, **kw)
    runs = {
        "ours, scanned layers, no remat (model=small before)": ours(cfg, copy(), tokens, adv),
        "ours, scanned, remat dots (model=small now)": ours(with_(remat="dots"), copy(),
                                                            tokens, adv),
        "ours, layers unrolled, no remat": ours(cfg, copy(), tokens, adv, unroll=True),
        "ours, scanned, remat full": ours(with_(remat="full"), copy(), tokens, adv),
        "ours, scanned, head in chunks of 16": ours(with_(logits_chunk_tokens=16), copy(),
                                                    tokens, adv),
        "ours, remat dots, each group's prompt once (algo.share_prompts)": ours(
            with_(remat="dots"), copy(), tokens, adv, group_size=G),
        "torch, TRL's GRPO loss": torch_grpo(hf_model, tokens, adv),
    }
    for run in runs.values():
        run()  # warm-up (torch's first call; ours are compiled already)
    times = {k: [] for k in runs}
    for _ in range(args.repeats):
        for k, run in runs.items():
            times[k].append(run())
    ref = next(iter(times.values()))
    print(f"{args.model} model, {args.batch} rows x ({L} + {R}) tokens, one update, jax "
          f"{jax.__version__} / torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"median of {args.repeats} alternating runs")
    print("| step | seconds | first row / this (per-repeat median) |")
    print("|---|---|---|")
    for k, t in times.items():
        print(f"| {k} | {statistics.median(t):.3f} | "
              f"{statistics.median(a / b for a, b in zip(ref, t)):.2f}x |")


if __name__ == "__main__":
    main()
