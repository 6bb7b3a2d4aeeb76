"""Hugging Face Qwen2/Llama import and export against transformers (torch CPU): logits on a
padded batch, greedy KV-cache decode vs generate(), export -> HF load, import -> export ->
import exact. Every model is a tiny random one made here (nothing is downloaded)."""

import json

import jax
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = None  # the module's first test imports it (at collection it cost each worker ~2 s)

from rlvr_jax.models import hf  # noqa: E402
from rlvr_jax.models.policy import Decoder  # noqa: E402
from rlvr_jax.models.rope import positions_from_mask  # noqa: E402
from rlvr_jax.sampling import make_sampler  # noqa: E402

pytestmark = pytest.mark.slow  # see pyproject.toml: not in the daily `-m "not slow"` run


@pytest.fixture(autouse=True, scope="module")
def _torch():
    global torch
    torch = pytest.importorskip("torch")  # a test extra: pip install -e '.[test]'


VOCAB = 97
VARIANTS = {
    # family, tied embeddings, extra config
    "qwen2-tied": ("qwen2", True, {}),
    "qwen2-untied": ("qwen2", False, {"rope_theta": 1e6}),
    "llama-untied": ("llama", False, {}),
    "llama-tied-llama3rope-headdim": ("llama", True, {
        "head_dim": 24, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 16},
        "max_position_embeddings": 64}),
    "llama-linear-rope": ("llama", False, {"rope_scaling": {"rope_type": "linear",
                                                            "factor": 2.0}}),
}


def _make_hf(tmp_path, name):
    family, tied, extra = VARIANTS[name]
    cls = {"qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
           "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}[family]
    config = cls[0](vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                    tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                    **extra)
    torch.manual_seed(0)
    model = cls[1](config).eval()
    with torch.no_grad():  # random norms and biases too, so a dropped tensor shows up
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or n.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    path = tmp_path / name
    model.save_pretrained(path)
    return model, str(path)


def _batch():
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, VOCAB, size=(3, 7)).astype(np.int32)
    mask = np.ones((3, 7), np.int32)
    mask[1, :3] = 0  # left padding
    mask[2, :1] = 0
    tokens[mask == 0] = 0
    return tokens, mask


def _hf_logits(model, tokens, mask):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(tokens, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long),
                    position_ids=torch.tensor(np.asarray(positions_from_mask(mask)),
                                              dtype=torch.long))
    return out.logits.float().numpy()


def _our_logits(cfg, params, tokens, mask):
    logits = jax.jit(lambda p, t, m: Decoder(cfg, cfg.vocab_size).apply(
        {"params": p}, t, m, method="logits"))(
        params, tokens, mask)
    return np.asarray(logits)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_import_matches_transformers_logits(tmp_path, name):
    model, path = _make_hf(tmp_path, name)
    cfg, params = hf.load(path)
    tokens, mask = _batch()
    want, got = _hf_logits(model, tokens, mask), _our_logits(cfg, params, tokens, mask)
    valid = mask.astype(bool)
    np.testing.assert_allclose(got[valid], want[valid], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["qwen2-tied", "llama-untied"])
def test_greedy_kv_cache_decode_matches_generate(tmp_path, name):
    model, path = _make_hf(tmp_path, name)
    cfg, params = hf.load(path)
    tokens, mask = _batch()
    n = 8
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor(tokens, dtype=torch.long),
                             attention_mask=torch.tensor(mask, dtype=torch.long),
                             do_sample=False, max_new_tokens=n, min_new_tokens=n,
                             pad_token_id=0, eos_token_id=None)
    want = out[:, tokens.shape[1]:].numpy()
    model_ = Decoder(cfg, cfg.vocab_size)
    sample = make_sampler(model_, max_new_tokens=n, eos_id=-1, pad_id=0, temperature=0.0)
    rollout = sample(params, tokens, mask, jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(rollout.tokens_B_R), want)


@pytest.mark.parametrize("name", ["qwen2-untied", "llama-tied-llama3rope-headdim"])
def test_export_loads_in_transformers_with_the_same_logits(tmp_path, name):
    model, path = _make_hf(tmp_path, name)
    cfg, params = hf.load(path)
    out = tmp_path / "export"
    hf.save(str(out), params, cfg, hf.family_of(path))
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tokens, mask = _batch()
    np.testing.assert_allclose(_hf_logits(reloaded, tokens, mask), _hf_logits(model, tokens, mask),
                               rtol=1e-5, atol=1e-5)
    # import -> export -> import is exact
    cfg2, params2 = hf.load(str(out))
    assert cfg2.vocab_size == cfg.vocab_size and cfg2.rope_scaling == cfg.rope_scaling
    jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_bad_directories_name_the_file(tmp_path):
    with pytest.raises(hf.HFImportError, match="config.json: not found"):
        hf.load(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(hf.HFImportError, match="model_type 'gpt2'"):
        hf.load(str(tmp_path))
    _, path = _make_hf(tmp_path, "qwen2-tied")
    (tmp_path / "qwen2-tied" / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(hf.HFImportError, match="model.safetensors: cannot read"):
        hf.load(path)


def test_sharded_checkpoint_imports(tmp_path):
    model, path = _make_hf(tmp_path, "llama-untied")
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="60KB")
    assert (sharded / "model.safetensors.index.json").exists()
    assert len(list(sharded.glob("model-*.safetensors"))) > 1
    _, whole = hf.load(path)
    _, parts = hf.load(str(sharded))
    jax.tree.map(np.testing.assert_array_equal, parts, whole)
