"""The real-checkpoint path on CPU with a tiny random Qwen2-family model made here: the
gsm8k_grpo experiment trains from model.path on GSM8K-format data (chat template applied,
math verifier in worker processes), exports to a directory transformers loads with the same
logits, and `python -m rlvr_jax.evaluate` scores both the export and the run directory."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from rlvr_jax import export, loop
from rlvr_jax.checkpoint import read_policy_params
from rlvr_jax.models import hf
from rlvr_jax.models.policy import Decoder
from rlvr_jax.tools import tiny_hf
from tests.helpers import ROOT, run_config

SMALL = ["model.compute_dtype=float32", "sampling.max_new_tokens=12", "algo.prompts_per_step=4",
         "algo.samples_per_prompt=4", "algo.microbatches=2", "eval.num_problems=8",
         "eval.sequences_per_batch=8", "eval.every_steps=1", "num_steps=2", "logger.mode=disabled",
         "logger.progress_bar=false", "checkpoint.every_steps=1", "verifier.workers=1",
         # a random model is never right: format_penalty still separates unparseable output
         "verifier.reward_scheme=format_penalty", "algo.optim.lr_warmup_steps=0",
         "algo.optim.learning_rate=1e-3"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    tiny_hf.make_model(str(root / "model"), "qwen2")
    os.makedirs(root / "data")
    tiny_hf.make_gsm8k_like(str(root / "data" / "train.jsonl"), 64, seed=0)
    tiny_hf.make_gsm8k_like(str(root / "data" / "test.jsonl"), 16, seed=1)
    return root


@pytest.mark.slow
def test_gsm8k_grpo_trains_exports_and_evaluates(tiny, tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["+experiment=gsm8k_grpo", f"model.path={tiny / 'model'}",
                 f"task.train_path={tiny / 'data' / 'train.jsonl'}",
                 f"task.test_path={tiny / 'data' / 'test.jsonl'}", *SMALL]
    cfg = run_config(overrides, run_dir)
    summary = loop.run(cfg)
    assert summary["compiles"]["train_step"] == 1
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 2 and sum(steps[0][k] for k in steps[0] if k.startswith("status/")) == 16
    # The model was loaded, not warm-started: the run recorded the architecture it read from
    # model.path, and building left the caller's config as it was (the preset's 0.5B shapes).
    resolved = json.loads((run_dir / "run_config.json").read_text())["model"]
    assert resolved["num_layers"] == 2 and resolved["qkv_bias"]
    assert cfg.model.num_layers == 24
    warm = hf.load(str(tiny / "model"))[1]
    final, step = read_policy_params(str(run_dir))
    assert step == 2
    moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), final, warm)
    assert max(jax.tree.leaves(moved)) > 0

    out = tmp_path / "export"
    export.export(str(run_dir), str(out))
    cfg2, params2 = hf.load(str(out))
    jax.tree.map(np.testing.assert_array_equal, params2, final)
    torch = pytest.importorskip("torch")
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tokens = np.array([[5, 9, 14, 3, 7, 22]])
    with torch.no_grad():
        want = model(torch.tensor(tokens)).logits.numpy()
    got = Decoder(cfg2, cfg2.vocab_size).apply({"params": params2}, tokens, np.ones_like(tokens),
                                                   method="logits")
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)

    # The CLI on the exported HF directory; the same function in-process on the run directory.
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    res = tmp_path / "eval.json"
    data = str(tiny / "data" / "test.jsonl")
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr_jax.evaluate", str(out), "--data", data, "--n", "4",
         "--k", "1,2,4", "--max-new-tokens", "12", "--batch", "16", "--out", str(res)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "pass@4" in proc.stdout
    from rlvr_jax.evaluate import evaluate_model

    in_process = evaluate_model(str(run_dir), data, n=4, ks=[1, 2, 4], temperature=1.0,
                          max_new_tokens=12, num_problems=0, batch=16)
    for result in (json.loads(res.read_text()), in_process):
        assert result["problems"] == 16
        sampled = result["sampled_T1_n4"]
        for k in ("pass@1", "pass@2", "pass@4", "maj@4", "mean@4", "status/wrong"):
            assert k in sampled, k
        assert sampled["pass@1"] <= sampled["pass@2"] <= sampled["pass@4"]
        assert sum(v for k, v in sampled.items() if k.startswith("status/")) == 64
        assert "test" in sampled["by_source"]
    assert in_process["step"] == 2


def test_prompt_too_long_names_the_row(tiny, tmp_path):
    from rlvr_jax import build
    from rlvr_jax.data.loaders import DatasetError

    cfg = run_config(["+experiment=gsm8k_grpo", f"model.path={tiny / 'model'}",
                      f"task.train_path={tiny / 'data' / 'train.jsonl'}",
                      f"task.test_path={tiny / 'data' / 'test.jsonl'}",
                      "task.max_prompt_tokens=20", *SMALL], tmp_path)
    with pytest.raises(DatasetError, match=r"train.jsonl:1: prompt of \d+ tokens exceeds"):
        build.task_setup(cfg.task, cfg.model, cfg.sampling.max_new_tokens, str(tmp_path))


def test_bfloat16_compute_keeps_float32_logits_close(tiny):
    import dataclasses

    cfg, params = hf.load(str(tiny / "model"))
    tokens = np.arange(3, 19).reshape(2, 8)
    mask = np.ones_like(tokens)
    f32 = Decoder(cfg, cfg.vocab_size).apply({"params": params}, tokens, mask, method="logits")
    bf16_cfg = dataclasses.replace(cfg, compute_dtype="bfloat16")
    bf16 = Decoder(bf16_cfg, cfg.vocab_size).apply({"params": params}, tokens, mask,
                                                   method="logits")
    assert bf16.dtype == np.float32  # logits stay float32 whatever the compute dtype
    np.testing.assert_allclose(np.asarray(bf16), np.asarray(f32), atol=0.05)
