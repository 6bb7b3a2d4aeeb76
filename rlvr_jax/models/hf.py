"""Hugging Face Qwen2 / Llama checkpoints <-> our params, without torch.

Reads `config.json` into a ModelConfig and `model.safetensors` (or the shards listed in
`model.safetensors.index.json`) into the params pytree; writes both back in the same format,
so transformers (or vLLM) loads an exported directory. Our parameter names are HF's module
names, except that q/k/v and gate/up are stored fused (`qkv_proj`, `gate_up_proj`, as vLLM
fuses them; see policy.py): the mapping is a rename, a transpose (HF stores a linear layer's
weight as [out, in], flax's kernel is [in, out]) and, for the fused layers, a concatenation
along the output axis on import and a split on export.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import gate_up_sizes, qkv_sizes

FAMILIES = ("qwen2", "llama")


class HFImportError(ValueError):
    """A Hugging Face directory cannot be imported; the message names the file and field."""


def _read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise HFImportError(f"{path}: not found (expected a Hugging Face model directory)")
    except json.JSONDecodeError as e:
        raise HFImportError(f"{path}: not valid JSON ({e})")


def _rope_fields(hf: dict, path: str) -> dict:
    """theta and scaling from `rope_parameters` (transformers 5) or `rope_theta` +
    `rope_scaling` (older files)."""
    params = dict(hf.get("rope_scaling") or {})
    params.update(hf.get("rope_parameters") or {})
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    out = {"rope_theta": theta, "rope_scaling": "none" if kind == "default" else kind}
    if kind == "default":
        return out
    if kind not in ("linear", "llama3"):
        raise HFImportError(f"{path}: rope scaling type {kind!r} is not supported "
                            "(supported: default, linear, llama3)")
    out["rope_scaling_factor"] = float(params["factor"])
    if kind == "llama3":
        out.update(rope_low_freq_factor=float(params["low_freq_factor"]),
                   rope_high_freq_factor=float(params["high_freq_factor"]),
                   rope_original_max_positions=int(params["original_max_position_embeddings"]))
    return out


def read_config(model_dir: str, base: ModelConfig | None = None) -> ModelConfig:
    """ModelConfig for the model in `model_dir`; dtypes and init come from `base`."""
    path = os.path.join(model_dir, "config.json")
    hf = _read_json(path)
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise HFImportError(f"{path}: model_type {family!r} is not supported "
                            f"(supported: {', '.join(FAMILIES)})")
    if hf.get("hidden_act", "silu") != "silu":
        raise HFImportError(f"{path}: hidden_act {hf['hidden_act']!r} (only silu/SwiGLU)")
    if hf.get("mlp_bias") or (family == "llama" and hf.get("attention_bias")):
        raise HFImportError(f"{path}: mlp_bias / attention_bias (an o_proj bias) are not "
                            "supported")
    if family == "qwen2" and hf.get("use_sliding_window"):
        raise HFImportError(f"{path}: use_sliding_window=true is not supported")
    try:
        heads = int(hf["num_attention_heads"])
        fields = dict(
            name=os.path.basename(os.path.normpath(model_dir)), path=model_dir,
            vocab_size=int(hf["vocab_size"]), hidden_size=int(hf["hidden_size"]),
            num_layers=int(hf["num_hidden_layers"]), num_heads=heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=int(hf["head_dim"]) if hf.get("head_dim") else None,
            intermediate_size=int(hf["intermediate_size"]),
            rms_norm_eps=float(hf["rms_norm_eps"]), qkv_bias=family == "qwen2",
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)), **_rope_fields(hf, path))
    except KeyError as e:
        raise HFImportError(f"{path}: missing field {e.args[0]!r}") from None
    return dataclasses.replace(base or ModelConfig(), **fields)


def family_of(model_dir: str) -> str:
    return _read_json(os.path.join(model_dir, "config.json"))["model_type"]


def _load_tensors(model_dir: str) -> dict[str, np.ndarray]:
    index = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index):
        files = sorted(set(_read_json(index)["weight_map"].values()))
    elif os.path.exists(single):
        files = ["model.safetensors"]
    else:
        raise HFImportError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")
    out: dict[str, np.ndarray] = {}
    for name in files:
        try:
            out.update(load_file(os.path.join(model_dir, name)))
        except Exception as e:  # safetensors raises several types for bad files
            raise HFImportError(f"{os.path.join(model_dir, name)}: cannot read ({e})") from e
    return out


def _linear_names(cfg: ModelConfig) -> list[tuple[tuple[str, ...], str, int | None]]:
    """(HF module paths, our module path, layer) of every linear layer: `layer` i is row i of
    our stacked `layers/...` parameter, None an unstacked one. Our q/k/v and gate/up are
    fused: their kernel is the HF kernels side by side, in that order."""
    pairs: list[tuple[tuple[str, ...], str, int | None]] = []
    for i in range(cfg.num_layers):
        attn, mlp = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        pairs += [((f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"),
                   "layers/self_attn/qkv_proj", i),
                  ((f"{attn}.o_proj",), "layers/self_attn/o_proj", i),
                  ((f"{mlp}.gate_proj", f"{mlp}.up_proj"), "layers/mlp/gate_up_proj", i),
                  ((f"{mlp}.down_proj",), "layers/mlp/down_proj", i)]
    if not cfg.tie_embeddings:
        pairs.append((("lm_head",), "lm_head", None))
    return pairs


def _fused_sizes(cfg: ModelConfig, ours: str, features: int) -> tuple[int, ...]:
    """Output widths of the HF layers fused into our layer `ours`, in `_linear_names` order."""
    if ours.endswith("qkv_proj"):
        return qkv_sizes(cfg)
    if ours.endswith("gate_up_proj"):
        return gate_up_sizes(cfg)
    return (features,)


def _has_bias(cfg: ModelConfig, ours: str) -> bool:
    return cfg.qkv_bias and ours.endswith("qkv_proj")


def _norm_names(cfg: ModelConfig) -> list[tuple[str, str, int | None]]:
    pairs: list[tuple[str, str, int | None]] = [("model.norm", "norm", None)]
    for i in range(cfg.num_layers):
        for n in ("input_layernorm", "post_attention_layernorm"):
            pairs.append((f"model.layers.{i}.{n}", f"layers/{n}", i))
    return pairs


def _set(tree: dict, path: str, value) -> None:
    *parents, leaf = path.split("/")
    for p in parents:
        tree = tree.setdefault(p, {})
    tree[leaf] = value


def _get(tree: dict, path: str, layer: int | None = None):
    for p in path.split("/"):
        tree = tree[p]
    return tree if layer is None else tree[layer]


def hf_to_params(tensors: dict[str, np.ndarray], cfg: ModelConfig, where: str = "") -> dict:
    """HF state dict (numpy) -> our params (numpy, cfg.param_dtype); the per-layer HF tensors
    stacked into our [N, ...] `layers/...` parameters."""
    dt = np.dtype(cfg.param_dtype) if cfg.param_dtype != "bfloat16" else None
    import ml_dtypes  # numpy has no bfloat16; jax ships ml_dtypes

    dt = dt or np.dtype(ml_dtypes.bfloat16)
    used = set()
    stacks: dict[str, list] = {}  # our stacked path -> its N rows, in layer order

    def take(name):
        if name not in tensors:
            raise HFImportError(f"{where}: tensor {name!r} missing from the safetensors")
        used.add(name)
        return np.asarray(tensors[name]).astype(np.float32)

    def put(path: str, layer: int | None, value: np.ndarray) -> None:
        if layer is None:
            _set(params, path, value.astype(dt))
        else:
            stacks.setdefault(path, []).append(value.astype(dt))

    params: dict = {}
    put("embed_tokens/embedding", None, take("model.embed_tokens.weight"))
    for hf_names, ours, layer in _linear_names(cfg):
        put(f"{ours}/kernel", layer,
            np.concatenate([take(f"{n}.weight").T for n in hf_names], axis=1))
        if _has_bias(cfg, ours):
            put(f"{ours}/bias", layer, np.concatenate([take(f"{n}.bias") for n in hf_names]))
    for hf_name, ours, layer in _norm_names(cfg):
        put(f"{ours}/weight", layer, take(f"{hf_name}.weight"))
    for path, rows in stacks.items():
        _set(params, path, np.stack(rows))
    # A tied checkpoint may still store lm_head.weight (a copy of the embedding).
    unused = set(tensors) - used - ({"lm_head.weight"} if cfg.tie_embeddings else set())
    unused = {n for n in unused if not n.endswith("rotary_emb.inv_freq")}
    if unused:
        raise HFImportError(f"{where}: tensors this architecture does not use: "
                            f"{sorted(unused)[:5]}")
    return params


def params_to_hf(params: dict, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """Our params -> HF state dict (float32 numpy, contiguous); stacked layers unstacked."""
    f32 = lambda x: np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    out = {"model.embed_tokens.weight": f32(_get(params, "embed_tokens/embedding"))}
    for hf_names, ours, layer in _linear_names(cfg):
        kernel = np.asarray(_get(params, f"{ours}/kernel", layer), np.float32)
        bias = _get(params, f"{ours}/bias", layer) if _has_bias(cfg, ours) else None
        bounds = np.cumsum((0,) + _fused_sizes(cfg, ours, kernel.shape[1]))
        for n, lo, hi in zip(hf_names, bounds[:-1], bounds[1:]):
            out[f"{n}.weight"] = f32(kernel[:, lo:hi].T)
            if bias is not None:
                out[f"{n}.bias"] = f32(np.asarray(bias)[lo:hi])
    for hf_name, ours, layer in _norm_names(cfg):
        out[f"{hf_name}.weight"] = f32(_get(params, f"{ours}/weight", layer))
    return out


def load(model_dir: str, base: ModelConfig | None = None) -> tuple[ModelConfig, dict]:
    """(ModelConfig, params as numpy) from a local HF directory."""
    cfg = read_config(model_dir, base)
    return cfg, hf_to_params(_load_tensors(model_dir), cfg, model_dir)


def hf_config(cfg: ModelConfig, family: str, extra: dict | None = None) -> dict[str, Any]:
    """config.json for `cfg` in the given family (qwen2 | llama)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    if family == "llama" and cfg.qkv_bias:
        raise ValueError("a Llama config cannot express q/k/v biases without an o_proj bias; "
                         "export as qwen2")
    if family == "qwen2" and not cfg.qkv_bias:
        raise ValueError("Qwen2 always has q/k/v biases; export this model as llama")
    rope: dict[str, Any] = {"rope_type": "default" if cfg.rope_scaling == "none"
                            else cfg.rope_scaling, "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling != "none":
        rope["factor"] = cfg.rope_scaling_factor
    if cfg.rope_scaling == "llama3":
        rope.update(low_freq_factor=cfg.rope_low_freq_factor,
                    high_freq_factor=cfg.rope_high_freq_factor,
                    original_max_position_embeddings=cfg.rope_original_max_positions)
    out = {
        "architectures": ["Qwen2ForCausalLM" if family == "qwen2" else "LlamaForCausalLM"],
        "model_type": family, "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.resolved_head_dim, "hidden_act": "silu", "rms_norm_eps": cfg.rms_norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings, "rope_theta": cfg.rope_theta,
        "rope_parameters": rope, "torch_dtype": "float32",
        "max_position_embeddings": max(32768, 2 * cfg.rope_original_max_positions),
    }
    if family == "llama":
        out.update(attention_bias=False, mlp_bias=False)
    return out | (extra or {})


def save(out_dir: str, params: dict, cfg: ModelConfig, family: str,
         extra_config: dict | None = None) -> None:
    """Write config.json + model.safetensors (float32)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config(cfg, family, extra_config), f, indent=2)
    save_file(params_to_hf(params, cfg), os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
