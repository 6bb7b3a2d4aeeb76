"""Make a tiny random Hugging Face model directory of the Qwen2 (or Llama) family, and a small
GSM8K-format dataset, for CPU smoke tests of the real-checkpoint path (nothing is downloaded):

    python -m rlvr_jax.tools.tiny_hf OUT_DIR [--family qwen2|llama] [--data DATA_DIR]
                                     [--prefs PREFS_DIR] [--mixed MIXED_DIR]

The model gets config.json + model.safetensors (random init, written by our exporter) and a
character-level tokenizer with Qwen's chat markers and chat template, saved by transformers.
The dataset rows are GSM8K-shaped word problems over small additions ("#### N" answers); the
preference rows pair the correct answer (chosen) with one off by 1..5 (rejected).
"""

from __future__ import annotations

if __name__ == "__main__":  # the command, not the library: before transformers is imported
    from rlvr_jax import console

    console.quiet_offline()

import argparse
import json
import os
import string

import jax
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlvr_jax.config import ModelConfig
from rlvr_jax.models import hf
from rlvr_jax.models.policy import Decoder, init_params

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2.5's tool markers, special tokens there too (after the characters: the ids of the
# others are those of earlier tiny models).
TOOL_SPECIALS = ["<tool_call>", "</tool_call>"]
# Qwen2.5's layout: a tool result is a user turn wrapped in <tool_response> (consecutive
# results share one turn).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    # (an expression: the template's trim_blocks would drop a newline right after a tag)
    "{{ '\\n<tool_response>\\n' }}{{ message['content'] }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_tokenizer(out_dir: str) -> PreTrainedTokenizerFast:
    chars = sorted(set(string.printable) - set("\x0b\x0c"))
    vocab = {tok: i for i, tok in enumerate(SPECIALS + chars + TOOL_SPECIALS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIALS + TOOL_SPECIALS)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(out_dir)
    return tok


def make_model(out_dir: str, family: str = "qwen2", hidden: int = 64, layers: int = 2,
               seed: int = 0) -> ModelConfig:
    tok = make_tokenizer(out_dir)
    cfg = ModelConfig(name=f"tiny-{family}", vocab_size=len(tok), hidden_size=hidden,
                      num_layers=layers, num_heads=4, num_kv_heads=2,
                      intermediate_size=2 * hidden, qkv_bias=family == "qwen2",
                      tie_embeddings=True, rope_theta=1e6 if family == "qwen2" else 5e5)
    params = init_params(Decoder(cfg, cfg.vocab_size), jax.random.key(seed))
    hf.save(out_dir, jax.tree.map(np.asarray, params), cfg, family,
            {"bos_token_id": None, "eos_token_id": tok.eos_token_id,
             "pad_token_id": tok.pad_token_id})
    return cfg


def make_gsm8k_like(path: str, count: int, seed: int) -> None:
    """GSM8K-format rows: {"question", "answer": "<worked solution>\\n#### N"}."""
    rng = np.random.default_rng(seed)
    names = ["Ann", "Bo", "Cy", "Di"]
    with open(path, "w") as f:
        for _ in range(count):
            a, b = (int(x) for x in rng.integers(1, 50, size=2))
            who = names[int(rng.integers(len(names)))]
            row = {"question": f"{who} has {a} apples and buys {b} more. How many now?",
                   "answer": f"{who} has {a} + {b} = {a + b} apples.\n#### {a + b}"}
            f.write(json.dumps(row) + "\n")


def make_preferences_like(path: str, count: int, seed: int) -> None:
    """Preference rows ("pairs" format) over the same word problems: {"prompt": [a user
    message], "chosen": the right answer ("#### N"), "rejected": one off by 1..5}."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(count):
            a, b = (int(x) for x in rng.integers(1, 50, size=2))
            wrong = a + b + int(rng.integers(1, 6)) * (1 if rng.random() < 0.5 else -1)
            question = f"Ann has {a} apples and buys {b} more. How many now?"
            answer = lambda n: f"#### {n}"  # short: within a tiny run's response budget
            f.write(json.dumps({"prompt": [{"role": "user", "content": question}],
                                "chosen": answer(a + b), "rejected": answer(wrong)}) + "\n")


def make_mixed_like(path: str, count: int, seed: int) -> None:
    """verl-format rows of four sources in turn, each with its own verifier (task=mixed):
    GSM8K-like maths (`openai/gsm8k`), stdin/stdout programs (`apps`), MBPP-style asserts
    (`mbpp`) and reasoning-gym's chain_sum items with their metadata (`chain_sum`)."""
    rng = np.random.default_rng(seed)
    user = lambda text: [{"role": "user", "content": text}]
    with open(path, "w") as f:
        for i in range(count):
            a, b = (int(x) for x in rng.integers(1, 50, size=2))
            kind = i % 4
            if kind == 0:
                row = {"data_source": "openai/gsm8k",
                       "prompt": user(f"Ann has {a} apples and buys {b} more. How many now?"),
                       "reward_model": {"ground_truth": f"#### {a + b}"}}
            elif kind == 1:
                tests = {"inputs": [f"{a} {b}\n", f"{b} {a + 1}\n"],
                         "outputs": [f"{a + b}\n", f"{a + b + 1}\n"]}
                row = {"data_source": "apps", "prompt": user("Read two integers; print their "
                                                              "sum."),
                       "reward_model": {"ground_truth": json.dumps(tests)}}
            elif kind == 2:
                row = {"data_source": "mbpp", "prompt": user(f"Write add{a}(x): x + {a}."),
                       "reward_model": {"ground_truth": {
                           "test_list": [f"assert add{a}({b}) == {a + b}",
                                         f"assert add{a}(0) == {a}"]}}}
            else:
                row = {"data_source": "chain_sum",
                       "prompt": user(f"State the final answer: {a} + {b} = "
                                      "(inside <answer></answer>)"),
                       "reward_model": {"ground_truth": str(a + b)},
                       "extra_info": {"metadata": {"source_dataset": "chain_sum",
                                                   "expression": f"{a} + {b}"}}}
            f.write(json.dumps(row) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--family", default="qwen2", choices=hf.FAMILIES)
    ap.add_argument("--data", default="", help="also write train.jsonl/test.jsonl here")
    ap.add_argument("--prefs", default="", help="also write preference train/test files here")
    ap.add_argument("--mixed", default="", help="also write mixed-source train/test files here")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    cfg = make_model(args.out_dir, args.family)
    print(f"wrote {args.out_dir}: {cfg.name}, vocab {cfg.vocab_size}")
    if args.data:
        os.makedirs(args.data, exist_ok=True)
        make_gsm8k_like(os.path.join(args.data, "train.jsonl"), 512, seed=0)
        make_gsm8k_like(os.path.join(args.data, "test.jsonl"), 64, seed=1)
        print(f"wrote {args.data}/train.jsonl (512 rows), test.jsonl (64 rows)")
    if args.prefs:
        os.makedirs(args.prefs, exist_ok=True)
        make_preferences_like(os.path.join(args.prefs, "train.jsonl"), 512, seed=2)
        make_preferences_like(os.path.join(args.prefs, "test.jsonl"), 64, seed=3)
        print(f"wrote {args.prefs}/train.jsonl (512 pairs), test.jsonl (64 pairs)")
    if args.mixed:
        os.makedirs(args.mixed, exist_ok=True)
        make_mixed_like(os.path.join(args.mixed, "train.jsonl"), 256, seed=4)
        make_mixed_like(os.path.join(args.mixed, "test.jsonl"), 32, seed=5)
        print(f"wrote {args.mixed}/train.jsonl (256 rows), test.jsonl (32 rows)")


if __name__ == "__main__":
    main()
