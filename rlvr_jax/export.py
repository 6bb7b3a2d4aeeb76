"""Export a run's policy as a Hugging Face directory:

    python -m rlvr_jax.export RUN_DIR OUT_DIR [--step N] [--family qwen2|llama]

writes config.json, model.safetensors (float32) and the tokenizer files, which
`transformers.AutoModelForCausalLM.from_pretrained(OUT_DIR)` and vLLM load (the export needs
no torch; loading it with transformers does: `pip install -e '.[hf]'`). RUN_DIR is a run
directory (it holds run_config.json and checkpoints/); the latest checkpoint is used unless
--step is given. The family defaults to the imported model's, else qwen2 when the model has
q/k/v biases and llama when it has none."""

from __future__ import annotations

if __name__ == "__main__":  # the command, not the library: before transformers is imported
    from rlvr_jax import console

    console.quiet_offline()

import argparse
import dataclasses
import json
import os
import sys

from rlvr_jax import lora
from rlvr_jax.checkpoint import CheckpointError, read_policy_params, read_warmstart_params
from rlvr_jax.config import ModelConfig, recorded_model_config
from rlvr_jax.models import hf
from rlvr_jax.tokenizer import load_pretrained_tokenizer, load_tokenizer


def policy_of_run(run_dir: str, cfg: ModelConfig, step: int | None = None) -> tuple[dict, int]:
    """(the policy's whole tree as host arrays, step) of a run's checkpoint `step` (latest if
    None). A LoRA run's checkpoints hold the adapters only: they are merged with the frozen
    base, the run's warm-start params or, for a run from model.path, the HF weights."""
    params, step = read_policy_params(run_dir, step)
    if cfg.lora_rank:
        base = (hf.load(cfg.path, cfg)[1] if cfg.path else read_warmstart_params(run_dir))
        params = lora.merge(base, params)
    return params, step


def export(run_dir: str, out_dir: str, step: int | None = None, family: str | None = None) -> str:
    cfg_path = os.path.join(run_dir, "run_config.json")
    if not os.path.exists(cfg_path):
        raise CheckpointError(f"{cfg_path}: not found (RUN_DIR must be a run directory)")
    with open(cfg_path) as f:
        cfg = recorded_model_config(json.load(f)["model"])
    params, step = policy_of_run(run_dir, cfg, step)
    params = lora.fold(params, cfg.lora_scale)  # LoRA: W + (alpha / r) A B, plain weights
    if cfg.path:
        tokenizer = load_pretrained_tokenizer(cfg.path)
        family = family or hf.family_of(cfg.path)
    else:
        tokenizer = load_tokenizer(os.path.join(run_dir, "tokenizer"))
        family = family or ("qwen2" if cfg.qkv_bias else "llama")
    cfg = dataclasses.replace(cfg, vocab_size=cfg.vocab_size or len(tokenizer))
    hf.save(out_dir, params, cfg, family, {"eos_token_id": tokenizer.eos_token_id,
                                           "pad_token_id": tokenizer.pad_token_id})
    tokenizer.save_pretrained(out_dir)
    return f"exported step {step} of {run_dir} as {family} to {out_dir}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--family", choices=hf.FAMILIES, default=None)
    args = ap.parse_args(argv)
    try:
        print(export(args.run_dir, args.out_dir, args.step, args.family))
    except (CheckpointError, hf.HFImportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)  # a user error (bad path, config, checkpoint), as the training command


if __name__ == "__main__":
    main()
