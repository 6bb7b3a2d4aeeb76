"""The only file that names mesh axes, and the rules that place every array on them.

Three mesh axes: `data` (pure data parallelism: params replicated), `fsdp` (params, gradients
and optimizer state sharded, ZeRO-3 style; the batch split over it too) and `model` (tensor
parallelism: attention heads, MLP columns and the vocabulary split across it, Megatron style).

Placement is data, in two tables (as big_vision's `sharding_rules` or levanter's
`axis_resources`):
  * PARAM_AXES: a parameter's path -> the logical axis of each of its dimensions;
  * RULES: a logical axis -> the mesh axes it is split over.
A dimension the mesh axes do not divide stays whole (e.g. a 20-word test vocabulary on a
model axis of 8). The optimizer's moments mirror the params' paths and get the same specs;
anything no rule names (step counters, scalars) is replicated. On one device every sharding
is trivial and the same code runs unchanged.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as PS

from rlvr_jax.config import ConfigError

DATA, FSDP, MODEL = "data", "fsdp", "model"

# logical axis -> mesh axes (None: never split)
RULES: dict[str, Any] = {
    "batch": (DATA, FSDP),
    "embed": FSDP,
    "vocab": MODEL,
    "heads": MODEL,  # q/k/v's output and o_proj's input: whole heads... when the axis divides
    "mlp": MODEL,
    "layers": None,  # the scanned stack's leading axis: each device holds every layer's shard
    "none": None,
}

# parameter path (its last two keys) -> logical axes of its dimensions, first match wins. A
# parameter under a `layers/` stack (the decoder's scanned blocks) has one more leading
# dimension, the logical axis `layers`.
PARAM_AXES: list[tuple[str, tuple[str, ...]]] = [
    (r"embed_tokens/embedding$", ("vocab", "embed")),
    (r"lm_head/kernel$", ("embed", "vocab")),
    (r"qkv_proj/kernel$", ("embed", "heads")),
    (r"qkv_proj/bias$", ("heads",)),
    (r"o_proj/kernel$", ("heads", "embed")),
    (r"gate_up_proj/kernel$", ("embed", "mlp")),
    (r"down_proj/kernel$", ("mlp", "embed")),
    (r"v_proj/kernel$", ("embed", "none")),  # the value head
    (r"(weight|bias)$", ("none",)),  # norms, the value head's bias
]


def make_mesh(data: int = -1, fsdp: int = 1, model: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, model) mesh; -1 on one axis takes all remaining devices.

    Built with `Mesh` directly: `jax.make_mesh` defaults to Explicit axis types, under which a
    linen embedding gather on a batch-sharded input raises ShardingTypeError."""
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices)
    sizes = {"mesh.data": data, "mesh.fsdp": fsdp, "mesh.model": model}
    if list(sizes.values()).count(-1) > 1:
        raise ConfigError("config keys 'mesh.data', 'mesh.fsdp', 'mesh.model': at most one may "
                          "be -1")
    known = int(np.prod([s for s in sizes.values() if s != -1]))
    sizes = {k: (n // known if v == -1 else v) for k, v in sizes.items()}
    if int(np.prod(list(sizes.values()))) != n:
        raise ConfigError(" x ".join(f"'{k}'={v}" for k, v in sizes.items())
                          + f" (config keys) must equal the device count {n}")
    shape = tuple(sizes.values())
    return Mesh(np.array(devices).reshape(shape), (DATA, FSDP, MODEL))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) dimension split over the data-parallel axes; other dimensions whole."""
    return NamedSharding(mesh, PS(RULES["batch"]))


def rows_sharding(mesh: Mesh, axis: int) -> NamedSharding:
    """Dimension `axis` (a batch of rows) split over the data-parallel axes; others whole."""
    return NamedSharding(mesh, PS(*([None] * axis), RULES["batch"]))


def microbatch_sharding(mesh: Mesh) -> NamedSharding:
    """[microbatches, rows, ...]: every microbatch's rows split over the data-parallel axes."""
    return NamedSharding(mesh, PS(None, RULES["batch"]))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PS())


def _path(key_path) -> str:
    parts = []
    for k in key_path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
    return "/".join(parts)


def logical_axes(path: str, ndim: int) -> tuple[str, ...]:
    """The logical axes of the array at `path` (a '/'-joined key path); unnamed: 'none'."""
    stacked = ("layers",) if re.search(r"(^|/)layers/", path) else ()
    for pattern, axes in PARAM_AXES:
        if re.search(pattern, path) and len(stacked + axes) == ndim:
            return stacked + axes
    return ("none",) * ndim


def spec_for(path: str, shape: tuple[int, ...], mesh: Mesh) -> PS:
    """The PartitionSpec RULES give the array at `path`; an axis its mesh axes do not divide
    stays whole."""
    spec = []
    for axis, size in zip(logical_axes(path, len(shape)), shape):
        mesh_axes = RULES[axis]
        if mesh_axes is None:
            spec.append(None)
            continue
        names = (mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes)
        names = tuple(a for a in names if mesh.shape[a] > 1)
        span = int(np.prod([mesh.shape[a] for a in names])) if names else 1
        spec.append((names[0] if len(names) == 1 else names) if names and size % span == 0
                    else None)
    return PS(*spec)


def state_shardings(abstract_tree: Any, mesh: Mesh) -> Any:
    """NamedSharding for every leaf of a (params / optimizer state) pytree of shaped values."""
    return jax.tree_util.tree_map_with_path(
        lambda p, x: NamedSharding(mesh, spec_for(_path(p), tuple(x.shape), mesh)),
        abstract_tree)


def check_batch(batch_size: int, mesh: Mesh, key: str) -> None:
    """The batch splits evenly over the data-parallel axes (the model axis holds it whole)."""
    split = mesh.shape[DATA] * mesh.shape[FSDP]
    if batch_size % split:
        raise ConfigError(f"config key '{key}': batch of {batch_size} sequences is not a multiple "
                         f"of the {split} data-parallel devices (mesh.data x mesh.fsdp)")
