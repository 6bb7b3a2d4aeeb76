"""Tasks: one module per family, each a `Task` (base.py) that declares its config schema,
builder and verifier kinds in the registry (registry.py). The loop and stages only see the
protocol."""

from __future__ import annotations

from rlvr_jax.tasks.base import Task


def build(t, tokenizer) -> Task:
    """The configured task (`t`: its registered schema). Dataset tasks read and check their
    files here (with the tokenizer, for the prompt budget)."""
    from rlvr_jax.tasks import registry

    return registry.get(t.name).build(t, tokenizer)
