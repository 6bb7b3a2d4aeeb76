"""The only file that names mesh axes.

Two axes: `data` (pure data parallelism: params replicated) and `fsdp` (params, gradients and
optimizer state sharded; batch split over it too). The batch dimension of every array is split
over both axes together, so B must be a multiple of the device count. Parameters are sharded
by a shape rule (largest dimension divisible by the fsdp size), which also covers the optimizer
moments, whose shapes mirror the params. On 1 CPU every sharding is trivial and the same code
runs unchanged.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as PS

DATA, FSDP = "data", "fsdp"


def make_mesh(data: int = -1, fsdp: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp) mesh; -1 on one axis takes all remaining devices.

    Built with `Mesh` directly: `jax.make_mesh` defaults to Explicit axis types, under which a
    linen embedding gather on a batch-sharded input raises ShardingTypeError."""
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices)
    if data == -1 and fsdp == -1:
        raise ValueError("config keys 'mesh.data' and 'mesh.fsdp': at most one may be -1")
    if data == -1:
        data = n // fsdp
    if fsdp == -1:
        fsdp = n // data
    if data * fsdp != n:
        raise ValueError(f"config keys 'mesh.data'={data} x 'mesh.fsdp'={fsdp} must equal the "
                         f"device count {n}")
    return Mesh(np.array(devices).reshape(data, fsdp), (DATA, FSDP))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) dimension split over every device; other dimensions whole."""
    return NamedSharding(mesh, PS((DATA, FSDP)))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PS())


def _param_spec(shape: tuple[int, ...], fsdp_size: int) -> PS:
    if fsdp_size == 1 or not shape:
        return PS()
    # Shard the largest dimension the fsdp size divides; small or indivisible leaves replicate.
    for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
        if shape[dim] % fsdp_size == 0:
            spec = [None] * len(shape)
            spec[dim] = FSDP
            return PS(*spec)
    return PS()


def state_shardings(abstract_tree: Any, mesh: Mesh) -> Any:
    """NamedSharding for every leaf of a (params / optimizer state) pytree of shaped values."""
    fsdp_size = mesh.shape[FSDP]
    return jax.tree.map(lambda x: NamedSharding(mesh, _param_spec(tuple(x.shape), fsdp_size)),
                        abstract_tree)


def check_batch(batch_size: int, mesh: Mesh, key: str) -> None:
    if batch_size % mesh.size:
        raise ValueError(f"config key '{key}': batch of {batch_size} sequences is not a multiple "
                         f"of the {mesh.size} devices in the mesh")
