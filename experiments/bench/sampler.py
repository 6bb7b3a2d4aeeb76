"""Our jitted sampler vs transformers `generate` on the same weights, side by side.

    python experiments/bench/sampler.py [--repeats 5] [--batch 64] [--new-tokens 32]

For each model size, random weights are made with our initialiser and written through our
exporter; transformers (torch CPU) loads that directory. Both sample at temperature 1 with no
top-k/top-p, exactly `--new-tokens` new tokens per row (no EOS), KV cache on both, from the
same prompts. Runs alternate (ours, HF, ours, HF, ...) after one warm-up each (our compile,
torch's first call); the table reports the median tokens/s of each, the median of the
per-repeat speed ratios, and the process's peak RSS. Needs the test extra (torch==2.13.0).

Ours runs on each mesh in `--devices`: the same jitted sampler with the batch split over the
`data` axis of that many CPU host devices (`jax_num_cpu_devices`), params replicated. With 2
devices on a 2-core machine, each core runs its half of the batch on its own; with 1 device,
XLA:CPU spreads single ops over both cores, which pays off only for ops big enough to split
(the small model's products), while the tiny model's step runs one op at a time on one core.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time

import jax
import numpy as np
import torch
import transformers

from rlvr_jax import sharding
from rlvr_jax.config import ModelConfig
from rlvr_jax.models import hf
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.sampling import make_sampler

SIZES = {
    "tiny": dict(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384),
    "small": dict(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4,
                  intermediate_size=1536),
}
VOCAB, PROMPT = 512, 16


def bench(name: str, batch: int, new: int, repeats: int, device_counts: list[int]) -> list[dict]:
    cfg = ModelConfig(name=name, vocab_size=VOCAB, tie_embeddings=False, qkv_bias=True,
                      init_std=0.02, **SIZES[name])
    model = Decoder(cfg, VOCAB)
    params = jax.tree.map(np.asarray, init_params(model, jax.random.key(0)))
    rng = np.random.default_rng(0)
    prompt = rng.integers(3, VOCAB, size=(batch, PROMPT)).astype(np.int32)
    mask = np.ones_like(prompt)
    with tempfile.TemporaryDirectory() as d:
        hf.save(d, params, cfg, "qwen2")
        hf_model = transformers.AutoModelForCausalLM.from_pretrained(d).eval()

    def ours_on(n_devices: int):
        mesh = sharding.make_mesh(data=n_devices, fsdp=1, devices=jax.devices()[:n_devices])
        rows = sharding.batch_sharding(mesh)
        p = jax.device_put(params, sharding.replicated(mesh))
        x, m = jax.device_put(prompt, rows), jax.device_put(mask, rows)
        sample = make_sampler(model, max_new_tokens=new, eos_id=-1, pad_id=0, temperature=1.0)

        def run(i):
            t0 = time.perf_counter()
            out = sample(p, x, m, jax.random.key(i))
            out.tokens_B_R.block_until_ready()
            assert out.mask_B_R.shape == (batch, new)
            return time.perf_counter() - t0
        return run

    ids, att = torch.tensor(prompt, dtype=torch.long), torch.tensor(mask, dtype=torch.long)

    def theirs(i):
        torch.manual_seed(i)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = hf_model.generate(input_ids=ids, attention_mask=att, do_sample=True,
                                    temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new,
                                    min_new_tokens=new, eos_token_id=None, pad_token_id=0,
                                    use_cache=True)
        assert out.shape == (batch, PROMPT + new)
        return time.perf_counter() - t0

    ours = {n: ours_on(n) for n in device_counts}
    for run in ours.values():
        run(-1)  # compile
    theirs(-1)  # first call
    t_ours: dict[int, list[float]] = {n: [] for n in device_counts}
    t_hf = []
    for i in range(repeats):
        for n, run in ours.items():
            t_ours[n].append(run(i))
        t_hf.append(theirs(i))
    tokens = batch * new
    hf_tok_s = tokens / statistics.median(t_hf)
    # The ratio is the median over repeats of HF's time / ours in that repeat: run seconds
    # apart, the two see the same load on this shared machine, whose speed drifts by 10-20%
    # over a minute.
    return [{"model": name, "devices": n, "ours_tok_s": tokens / statistics.median(t),
             "hf_tok_s": hf_tok_s, "ratio": statistics.median(h / o for h, o in zip(t_hf, t))}
            for n, t in t_ours.items()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--devices", default="1,2",
                    help="comma-separated CPU device counts to run our sampler on")
    args = ap.parse_args()
    device_counts = [int(n) for n in args.devices.split(",")]
    jax.config.update("jax_num_cpu_devices", max(device_counts))  # before any device is used
    print(f"jax {jax.__version__} ({jax.default_backend()}), torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), transformers {transformers.__version__}; "
          f"batch {args.batch}, prompt {PROMPT}, {args.new_tokens} new tokens, T=1, "
          f"median of {args.repeats} alternating runs")
    print("| model | our sampler on | ours tokens/s | HF generate tokens/s | ratio |")
    print("|---|---|---|---|---|")
    for name in SIZES:
        for r in bench(name, args.batch, args.new_tokens, args.repeats, device_counts):
            on = "1 device" if r["devices"] == 1 else f"{r['devices']} devices, batch split"
            print(f"| {name} | {on} | {r['ours_tok_s']:.0f} | {r['hf_tok_s']:.0f} | "
                  f"{r['ratio']:.2f}x |", flush=True)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB")


if __name__ == "__main__":
    main()
