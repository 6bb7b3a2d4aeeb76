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

from rlvr_jax import build, evaluation, generate
from rlvr_jax.checkpoint import CheckpointError
from rlvr_jax.export import policy_of_run
from rlvr_jax.config import (ConfigError, DatasetTaskConfig, MeshConfig, ModelConfig,
                             SamplingConfig, to_run_config)
from rlvr_jax.data.loaders import DatasetError
from rlvr_jax.models import hf
from rlvr_jax.verify.verifiers import make_verifier


def _task_and_model(model: str, data: str | None):
    """(task config, model config, verifier kind) of what is evaluated: a run directory's own
    (its run_config.json), or a HF directory on a dataset."""
    if os.path.exists(os.path.join(model, "run_config.json")):
        with open(os.path.join(model, "run_config.json")) as f:
            run = to_run_config({k: v for k, v in json.load(f).items() if k != "run_dir"})
        task, model_cfg, kind = run.task, run.model, run.verifier.kind
    else:
        if not os.path.exists(os.path.join(model, "config.json")):
            raise ValueError(f"{model}: neither a run directory (run_config.json) nor a Hugging "
                             "Face directory (config.json)")
        if not data:
            raise ValueError("a Hugging Face directory needs --data (a JSONL/Parquet file)")
        task, model_cfg, kind = None, ModelConfig(path=model), "math"
    if data:
        task, kind = DatasetTaskConfig(train_path=data, test_path=data), "math"
    if task.name == "dataset" and not model_cfg.path:
        raise ValueError("--data needs MODEL to be a HF directory, or a run directory of a "
                         "model loaded from one")
    return task, model_cfg, kind


def evaluate_model(model: str, data: str | None, *, n: int, ks: list[int], temperature: float,
                   max_new_tokens: int, num_problems: int, batch: int, seed: int = 0,
                   step: int | None = None) -> dict:
    task_cfg, model_cfg, kind = _task_and_model(model, data)
    with tempfile.TemporaryDirectory() as work:
        tok_dir = os.path.join(model, "tokenizer") if not model_cfg.path else work
        setup = build.task_setup(task_cfg, model_cfg, max_new_tokens, tok_dir)
        # The builder's samplers: greedy, and T=`temperature` without truncation.
        policy = build.policy(setup, MeshConfig(), SamplingConfig(
            temperature=temperature, max_new_tokens=max_new_tokens), build.Traces())
        build.check_batches(policy.mesh, {"--batch": batch})
        verifier = make_verifier(kind, workers=2, timeout_s=10.0, batch_timeout_s=None,
                                 mode="forkserver")
        try:
            if os.path.exists(os.path.join(model, "run_config.json")):
                params, step = policy_of_run(model, setup.model_cfg, step)
            else:
                params = hf.load(model, setup.model_cfg)[1]
            params = jax.device_put(params, policy.shardings(params))
            problems = setup.task.heldout_set(num_problems or 10**9)
            out = {"model": model, "data": data, "step": step, "problems": len(problems)}
            common = dict(prompt_len=setup.prompt_len, batch_size=batch, put=policy.put,
                          key=jax.random.key(seed))
            answer_of = setup.task.answer_of
            one = lambda sample: generate.single_turn(sample, setup.tokenizer, policy.put,
                                                      every_row=True)
            v, texts, _ = evaluation.sample_and_verify(one(policy.sample_greedy), params, setup.task,
                                                    setup.tokenizer, problems, verifier,
                                                    samples_per_problem=1, **common)
            out["greedy"] = evaluation.report(problems, v, texts, 1, answer_of, [1])
            if n > 0:
                v, texts, _ = evaluation.sample_and_verify(
                    one(policy.sample_train), params, setup.task, setup.tokenizer, problems,
                    verifier, samples_per_problem=n, **common)
                out[f"sampled_T{temperature:g}_n{n}"] = evaluation.report(problems, v, texts, n,
                                                                          answer_of, ks)
            return out
        finally:
            verifier.close()


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
        result = evaluate_model(args.model, args.data, n=args.n,
                          ks=[int(k) for k in args.k.split(",")], temperature=args.temperature,
                          max_new_tokens=args.max_new_tokens, num_problems=args.num_problems,
                          batch=args.batch, seed=args.seed, step=args.step)
    except (CheckpointError, ConfigError, DatasetError, hf.HFImportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)  # a user error (bad path, config, checkpoint), as the training command
    print(table(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
