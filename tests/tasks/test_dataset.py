"""GSM8K-format data on the real-checkpoint path, piece by piece (the whole pipeline:
tests/test_end_to_end.py): a prompt over the budget names its row, and bfloat16 compute keeps
float32 logits close."""

import numpy as np
import pytest

from rlvr_jax.models import hf
from rlvr_jax.models.policy import Decoder
from tests.helpers import GSM8K_SMALL as SMALL
from tests.helpers import make_tiny_gsm8k, run_config


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_gsm8k(tmp_path_factory.mktemp("tiny"))


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


def test_the_gsm8k_preset_reads_verl_and_math_rows_too(tiny, tmp_path):
    """Issue 26: gsm8k_grpo pinned task.format=gsm8k, so a verl parquet or a MATH file failed
    with `missing field 'answer'`; the preset detects each row's format."""
    import json

    from rlvr_jax import build

    verl = {"data_source": "openai/gsm8k", "reward_model": {"style": "rule", "ground_truth": "4"},
            "prompt": [{"role": "user", "content": "2+2?"}]}
    math_row = {"problem": "Compute 1/2 + 1/4.", "solution": "$\\boxed{\\frac{3}{4}}$"}
    for name, row in (("verl.jsonl", verl), ("math.jsonl", math_row)):
        (tmp_path / name).write_text("\n".join(json.dumps(row) for _ in range(8)) + "\n")
    cfg = run_config(["+experiment=gsm8k_grpo", f"model.path={tiny / 'model'}",
                      f"task.train_path={tmp_path / 'verl.jsonl'}",
                      f"task.test_path={tmp_path / 'math.jsonl'}", *SMALL], tmp_path / "run")
    assert cfg.task.format == "auto"
    setup = build.task_setup(cfg.task, cfg.model, cfg.sampling.max_new_tokens,
                             str(tmp_path / "tok"))
    assert [p.answer for p in setup.task.heldout_set(1)] == ["\\frac{3}{4}"]
