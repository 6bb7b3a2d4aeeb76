"""Evaluate a policy on a dataset: greedy and n sampled completions per problem.

    python -m rlvr_jax.evaluate MODEL --data test.jsonl|humaneval [--n 4] [--k 1,4]
        [--temperature 1.0] [--max-new-tokens 512] [--num-problems N] [--batch 64]
        [--out results.json]

MODEL is a Hugging Face directory (Qwen2/Llama: config.json, safetensors, tokenizer) or a run
directory of ours (its latest checkpoint, or --step). A run trained with tools (`env`) is
evaluated as it trained: multi-turn episodes, its tools in the sandbox, its response budget
unless --max-new-tokens says otherwise. Reports accuracy, unbiased pass@k (Chen et
al. 2021), mean@k and maj@k for each k <= n, and the verdict status counts, overall and per
`data_source`; prints a table and writes JSON. Without --data, a run directory trained on the
arithmetic task is evaluated on that task's held-out set. The training loop's evaluation is the
same code (rlvr_jax/evaluation.py)."""

from __future__ import annotations

if __name__ == "__main__":  # the command, not the library: before transformers is imported
    from rlvr_jax import console

    console.quiet_offline()

import argparse
import json
import os
import sys
import tempfile
from typing import NamedTuple, Optional

import jax

from rlvr_jax import build, evaluation, warmstart
from rlvr_jax.checkpoint import CheckpointError
from rlvr_jax.export import policy_of_run
from rlvr_jax.config import (ConfigError, EnvConfig, MeshConfig, ModelConfig, SamplingConfig,
                             to_run_config)
from rlvr_jax.data.loaders import DatasetError
from rlvr_jax.models import hf
from rlvr_jax.tasks.dataset import DatasetTaskConfig
from rlvr_jax.verify.verifiers import make_verifier


class Target(NamedTuple):
    """What is evaluated, and how its own run evaluated it."""

    task: object  # task config
    model: ModelConfig
    verifier_kind: str
    env: EnvConfig  # multi-turn tools (kind none: one turn)
    max_new_tokens: Optional[int]  # the run's response budget (None: a HF directory)
    run_seed: Optional[int]  # the run's seed: its evaluations' draws (None: a HF directory)


def _target(model: str, data: str | None) -> Target:
    """A run directory's own task, model, verifier and environment (its run_config.json), or
    a HF directory on a dataset (one turn)."""
    env, budget, run_seed = EnvConfig(), None, None
    if os.path.exists(os.path.join(model, "run_config.json")):
        with open(os.path.join(model, "run_config.json")) as f:
            run = to_run_config({k: v for k, v in json.load(f).items()
                                 if k not in ("run_dir", "host")})
        task, model_cfg, kind = run.task, run.model, run.verifier.kind
        env, budget, run_seed = run.env, run.sampling.max_new_tokens, run.seed
    else:
        if not os.path.exists(os.path.join(model, "config.json")):
            raise ValueError(f"{model}: neither a run directory (run_config.json) nor a Hugging "
                             "Face directory (config.json)")
        if not data:
            raise ValueError("a Hugging Face directory needs --data (a JSONL/Parquet file)")
        task, model_cfg, kind = None, ModelConfig(path=model), "math"
    if data == "humaneval":  # the registered evaluation set (tasks/humaneval.py), sandboxed
        task, kind = None, "code"
    elif data:
        task, kind = DatasetTaskConfig(train_path=data, test_path=data), "math"
    if task is not None and task.name == "dataset" and not model_cfg.path:
        raise ValueError("--data needs MODEL to be a HF directory, or a run directory of a "
                         "model loaded from one")
    return Target(task, model_cfg, kind, env, budget, run_seed)


def evaluate_model(model: str, data: str | None, *, n: int, ks: list[int], temperature: float,
                   max_new_tokens: int | None, num_problems: int, batch: int,
                   seed: int | None = None, step: int | None = None) -> dict:
    """`max_new_tokens` None: the run's own response budget (512 for a HF directory).
    `seed` None: a run's own evaluation draws (its final evaluation's numbers come back when
    the problems and batch are the run's), key 0 for a HF directory."""
    t = _target(model, data)
    task_cfg, model_cfg, kind, env_cfg = t.task, t.model, t.verifier_kind, t.env
    max_new_tokens = max_new_tokens or t.max_new_tokens or 512
    key = (warmstart.eval_key(t.run_seed) if seed is None and t.run_seed is not None
           else jax.random.key(seed or 0))
    with tempfile.TemporaryDirectory() as work:
        tok_dir = os.path.join(model, "tokenizer") if not model_cfg.path else work
        setup = build.task_setup(task_cfg, model_cfg, max_new_tokens, tok_dir,
                                 ["humaneval"] if task_cfg is None else [],
                                 num_problems or 10**9)
        task = setup.task or setup.eval_sets[0][1]
        sampling = SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens)
        policy = build.policy(setup, MeshConfig(), sampling, build.Traces())
        build.check_batches(policy.mesh, {"--batch": batch})
        verifier = make_verifier(kind, workers=2, timeout_s=10.0, batch_timeout_s=None,
                                 mode="forkserver")
        env = build.environment(env_cfg)  # None: one turn
        try:
            # The builder's generators, as the run's own evaluation: greedy, and
            # T=`temperature` without truncation (every row's texts), one turn or episodes.
            gens = build.generators(policy, setup, sampling, env, env_cfg,
                                    train_every_row=True)
            if os.path.exists(os.path.join(model, "run_config.json")):
                params, step = policy_of_run(model, setup.model_cfg, step)
            else:
                params = hf.load(model, setup.model_cfg)[1]
            params = jax.device_put(params, policy.shardings(params))
            problems = task.heldout_set(num_problems or 10**9)
            out = {"model": model, "data": data, "step": step, "problems": len(problems)}
            common = dict(prompt_len=setup.prompt_len, batch_size=batch, put=policy.put,
                          key=key)
            answer_of = task.answer_of
            v, texts, _ = evaluation.sample_and_verify(gens.greedy, params, task,
                                                       setup.tokenizer, problems, verifier,
                                                       samples_per_problem=1, **common)
            out["greedy"] = evaluation.report(problems, v, texts, 1, answer_of, [1])
            if n > 0:
                v, texts, _ = evaluation.sample_and_verify(
                    gens.train, params, task, setup.tokenizer, problems,
                    verifier, samples_per_problem=n, **common)
                out[f"sampled_T{temperature:g}_n{n}"] = evaluation.report(problems, v, texts, n,
                                                                          answer_of, ks)
            if env is not None:
                out["environment"] = env_cfg.kind
                out["tools"] = list(env.tools)
            return out
        finally:
            verifier.close()
            if env is not None:
                env.close()


def table(result: dict) -> str:
    tools = (f", environment {result['environment']} (tools {','.join(result['tools'])})"
             if result.get("tools") else "")
    rows = [f"{result['model']} on {result['data'] or 'its held-out set'}: "
            f"{result['problems']} problems{tools}"]
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


def _ks(ap: argparse.ArgumentParser, text: str | None, n: int) -> list[int]:
    """--k as ints, each in 1..n (pass@k needs k samples); default: the powers of 2 <= n."""
    if n < 0:
        ap.error(f"--n {n}: must be >= 0")
    if text is None:
        return [2 ** i for i in range(max(n, 1).bit_length())]
    try:
        ks = [int(k) for k in text.split(",")]
    except ValueError:
        ap.error(f"--k {text!r}: comma-separated integers, e.g. 1,4")
    bad = [k for k in ks if not 1 <= k <= max(n, 1)]
    if bad:
        ap.error(f"--k {','.join(map(str, bad))}: each k must be in 1..--n ({n}); pass@k and "
                 f"maj@k need at least k samples per problem (raise --n)")
    return ks


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--data", default=None)
    ap.add_argument("--n", type=int, default=4, help="sampled completions per problem")
    ap.add_argument("--k", default=None,
                    help="comma-separated k for pass@k / maj@k, each <= n (default: 1,2,4,... <= n)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="response slots (default: a run's own, 512 for a HF directory)")
    ap.add_argument("--num-problems", type=int, default=0, help="0: all")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=None,
                    help="sampling key (default: a run's own evaluation draws, else 0)")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--out", default=None, help="JSON results path")
    args = ap.parse_args(argv)
    ks = _ks(ap, args.k, args.n)
    try:
        result = evaluate_model(args.model, args.data, n=args.n,
                          ks=ks, temperature=args.temperature,
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
