"""Tasks: one module per family, each a `Task` (base.py). `build` is the one place that maps
the task config onto a task type; the loop and stages only see the protocol."""

from __future__ import annotations

from rlvr_jax.config import TaskConfig
from rlvr_jax.tasks.base import Task


def build(t: TaskConfig, tokenizer) -> Task:  # type: ignore[valid-type]
    """The configured task. Dataset tasks read and check their files here (with the tokenizer,
    for the prompt budget)."""
    if t.name == "dataset":
        from rlvr_jax.tasks import dataset

        return dataset.load(t.train_path, t.test_path, t.format, t.on_bad_row,
                            t.max_prompt_tokens, tokenizer, t.instruction)
    if t.name == "codegen":
        from rlvr_jax.tasks.codegen import CodegenTask

        return CodegenTask(t.heldout_fraction, t.split_seed)
    from rlvr_jax.tasks.arithmetic import ArithmeticTask

    return ArithmeticTask(tuple(t.operators), t.operand_digits, t.min_operands, t.max_operands,
                          t.heldout_fraction, t.split_seed, t.prompt_template, t.zero_pad_operands)
