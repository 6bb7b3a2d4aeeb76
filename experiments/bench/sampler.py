"""Our jitted sampler vs transformers `generate` on the same weights, side by side.

    python experiments/bench/sampler.py [--repeats 5] [--batch 64] [--new-tokens 32]

For each model size, random weights are made with our initialiser and written through our
exporter; transformers (torch CPU) loads that directory. Both sample at temperature 1 with no
top-k/top-p, exactly `--new-tokens` new tokens per row (no EOS), KV cache on both, from the
same prompts. Runs alternate (ours, HF, ours, HF, ...) after one warm-up each (our compile,
torch's first call); the table reports the median tokens/s of each and the ratio, plus the
process's peak RSS. Needs the test extra (torch==2.13.0).
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

from rlvr_jax.config import ModelConfig
from rlvr_jax.models import hf
from rlvr_jax.models.policy import Decoder, KVCache, init_params
from rlvr_jax.sampling import make_sampler

SIZES = {
    "tiny": dict(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384),
    "small": dict(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4,
                  intermediate_size=1536),
}
VOCAB, PROMPT = 512, 16


def bench(name: str, batch: int, new: int, repeats: int) -> dict:
    cfg = ModelConfig(name=name, vocab_size=VOCAB, tie_embeddings=False, qkv_bias=True,
                      init_std=0.02, **SIZES[name])
    model = Decoder(cfg, VOCAB)
    params = init_params(model, jax.random.key(0))
    rng = np.random.default_rng(0)
    prompt = rng.integers(3, VOCAB, size=(batch, PROMPT)).astype(np.int32)
    mask = np.ones_like(prompt)
    with tempfile.TemporaryDirectory() as d:
        hf.save(d, jax.tree.map(np.asarray, params), cfg, "qwen2")
        hf_model = transformers.AutoModelForCausalLM.from_pretrained(d).eval()

    sample = make_sampler(model, max_new_tokens=new, eos_id=-1, pad_id=0, temperature=1.0)
    cache = KVCache.zeros(cfg, batch, PROMPT + new)

    def ours(i):
        nonlocal cache
        t0 = time.perf_counter()
        cache, out = sample(params, cache, prompt, mask, jax.random.key(i))
        out.tokens_B_N.block_until_ready()
        assert out.mask_B_N.shape == (batch, new)
        return time.perf_counter() - t0

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

    ours(-1), theirs(-1)  # compile / first call
    t_ours, t_hf = [], []
    for i in range(repeats):
        t_ours.append(ours(i))
        t_hf.append(theirs(i))
    tokens = batch * new
    a, b = tokens / statistics.median(t_ours), tokens / statistics.median(t_hf)
    return {"model": name, "ours_tok_s": a, "hf_tok_s": b, "ratio": a / b}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    args = ap.parse_args()
    print(f"jax {jax.__version__} ({jax.default_backend()}), torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), transformers {transformers.__version__}; "
          f"batch {args.batch}, prompt {PROMPT}, {args.new_tokens} new tokens, T=1, "
          f"median of {args.repeats} alternating runs")
    print("| model | ours tokens/s | HF generate tokens/s | ratio |")
    print("|---|---|---|---|")
    for name in SIZES:
        r = bench(name, args.batch, args.new_tokens, args.repeats)
        print(f"| {name} | {r['ours_tok_s']:.0f} | {r['hf_tok_s']:.0f} | {r['ratio']:.2f}x |",
              flush=True)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB")


if __name__ == "__main__":
    main()
