"""Evaluate a policy on a dataset: greedy and n sampled completions per problem.

    python -m rlvr_jax.evaluate MODEL --data test.jsonl [--n 4] [--k 1,4] [--temperature 1.0]
        [--max-new-tokens 512] [--num-problems N] [--batch 64] [--out results.json]

MODEL is a Hugging Face directory (Qwen2/Llama: config.json, safetensors, tokenizer) or a run
directory of ours (its latest checkpoint, or --step). Reports accuracy, unbiased pass@k (Chen et
al. 2021), mean@k and maj@k for each k <= n, and the verdict status counts, overall and per
`data_source`; prints a table and writes JSON. Without --data, a run directory trained on the
arithmetic task is evaluated on that task's held-out set. The training loop's evaluation is the
same code (rlvr_jax/evaluation.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import jax

from rlvr_jax import components, evaluation
from rlvr_jax.checkpoint import CheckpointError, read_policy_params
from rlvr_jax.config import to_run_config
from rlvr_jax.data.loaders import DatasetError
from rlvr_jax.models import hf
from rlvr_jax.sampling import make_sampler


def _run_config(model: str, data: str | None, max_new_tokens: int, batch: int, work_dir: str):
    """A RunConfig whose components are the evaluated model, task and verifier."""
    if os.path.exists(os.path.join(model, "run_config.json")):
        with open(os.path.join(model, "run_config.json")) as f:
            d = json.load(f)
        d["run_dir"] = model
    else:
        d = {"model": {"path": model}, "warmup": {"steps": 0}, "run_dir": work_dir,
             "task": {"name": "dataset"}}
    if data:
        d["task"] = dict(d.get("task", {}), name="dataset", train_path=data, test_path=data)
        d["verifier"] = dict(d.get("verifier", {}), kind="math")
        d["warmup"] = dict(d.get("warmup", {}), steps=0)
        if not d.get("model", {}).get("path") and not os.path.exists(
                os.path.join(model, "run_config.json")):
            raise ValueError("--data needs MODEL to be a HF directory or a run directory")
    d["sampling"] = dict(d.get("sampling", {}), max_new_tokens=max_new_tokens)
    d["eval"] = dict(d.get("eval", {}), sequences_per_batch=batch)
    # Training-batch settings must only fit the mesh: evaluation builds, never runs, the steps.
    d["algo"] = dict(d.get("algo", {}), prompts_per_step=jax.device_count(), samples_per_prompt=2,
                     sampled_prompts_per_step=0, dynamic_sampling=False, minibatches_per_epoch=1,
                     microbatches=1)
    d["mesh"] = {"data": -1, "fsdp": 1}
    d["logger"] = {"mode": "disabled"}
    return to_run_config(d)


def evaluate(model: str, data: str | None, *, n: int, ks: list[int], temperature: float,
             max_new_tokens: int, num_problems: int, batch: int, seed: int = 0,
             step: int | None = None) -> dict:
    with tempfile.TemporaryDirectory() as work:
        cfg = _run_config(model, data, max_new_tokens, batch, work)
        c = components.build(cfg)
        try:
            if os.path.exists(os.path.join(model, "run_config.json")):
                params, step = read_policy_params(model, step)
            else:
                params = hf.load(model, cfg.model)[1]
            params = jax.device_put(params, c.state_sharding(params))
            problems = c.task.heldout_set(num_problems or 10**9)
            sampler = lambda t: make_sampler(c.model, max_new_tokens=c.max_new_tokens,
                                             eos_id=c.tokenizer.eos_token_id,
                                             pad_id=c.tokenizer.pad_token_id, temperature=t)
            out = {"model": model, "data": data, "step": step, "problems": len(problems)}
            key = jax.random.key(seed)
            answer_of = getattr(c.task, "answer_of", lambda s: s.strip() or None)
            common = dict(prompt_len=c.prompt_len, batch_size=batch, put=c.put, key=key,
                          verify=c.verify)
            v, texts = evaluation.sample_and_verify(sampler(0.0), params, c.task, c.tokenizer,
                                                    problems, samples_per_problem=1, **common)
            out["greedy"] = evaluation.report(problems, v, texts, 1, answer_of, [1])
            if n > 0:
                v, texts = evaluation.sample_and_verify(
                    sampler(temperature), params, c.task, c.tokenizer, problems,
                    samples_per_problem=n, **common)
                out[f"sampled_T{temperature:g}_n{n}"] = evaluation.report(problems, v, texts, n,
                                                                          answer_of, ks)
            return out
        finally:
            c.close()


def table(result: dict) -> str:
    rows = [f"{result['model']} on {result['data'] or 'held-out arithmetic'}: "
            f"{result['problems']} problems"]
    for mode, r in result.items():
        if not isinstance(r, dict):
            continue
        metrics = "  ".join(f"{k} {v:.3f}" for k, v in r.items()
                            if not k.startswith("status/") and k != "by_source")
        statuses = ", ".join(f"{k[7:]} {v}" for k, v in r.items() if k.startswith("status/") and v)
        rows.append(f"  {mode:18s} {metrics}   [{statuses}]")
        for src, s in r.get("by_source", {}).items():
            rows.append(f"    {src:16s} " + "  ".join(f"{k} {v:.3f}" for k, v in s.items()
                                                    if "@" in k or k == "accuracy"))
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--data", default=None)
    ap.add_argument("--n", type=int, default=4, help="sampled completions per problem")
    ap.add_argument("--k", default="1,2,4", help="comma-separated k for pass@k / maj@k")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("--num-problems", type=int, default=0, help="0: all")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--out", default=None, help="JSON results path")
    args = ap.parse_args(argv)
    try:
        result = evaluate(args.model, args.data, n=args.n,
                          ks=[int(k) for k in args.k.split(",")], temperature=args.temperature,
                          max_new_tokens=args.max_new_tokens, num_problems=args.num_problems,
                          batch=args.batch, seed=args.seed, step=args.step)
    except (CheckpointError, DatasetError, hf.HFImportError, ValueError) as e:
        sys.exit(f"error: {e}")
    print(table(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
