"""Checkpoints: save / restore onto an FSDP mesh; a corrupt checkpoint names its path."""

import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.checkpoint import Checkpointer, CheckpointError, abstract_like, read_warmstart_params
from rlvr_jax.sharding import make_mesh, replicated, state_shardings
from rlvr_jax.types import LoopState, TrainState


def _state():
    params = {"w": jnp.arange(16.0).reshape(8, 2), "b": jnp.ones((3,))}
    return TrainState(jnp.int32(7), params, {"mu": jnp.zeros((8, 2))})


def test_small_replicated_arrays_are_saved_without_a_program_per_device(tmp_path, caplog):
    """Orbax's replica-parallel save sliced each replicated array once per device, a program
    each: 56 for a tiny model's params on 8 devices (2 s of compiles before its first save).
    Slices under 1 MiB are saved whole from one replica; the files and the restore are
    orbax's."""
    mesh = make_mesh(data=8)
    params = {f"w{i}": jnp.full((40 + i, 32), float(i)) for i in range(4)}
    state = jax.device_put(TrainState(jnp.int32(3), params, {}), replicated(mesh))
    ckpt = Checkpointer(str(tmp_path), every_steps=1, max_to_keep=1)
    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        ckpt.maybe_save(1, state, LoopState(1, 0, np.zeros(2, np.uint32)))
        ckpt.close()
    assert not [r for r in caplog.records if "Compiling jit(slice)" in r.getMessage()]
    # what orbax's default handler writes, its per-array metadata included
    assert (tmp_path / "checkpoints" / "1" / "state" / "array_metadatas").is_dir()
    again = Checkpointer(str(tmp_path), every_steps=1, max_to_keep=1)
    got, _ = again.restore(1, abstract_like(state))
    again.close()
    for k in params:
        np.testing.assert_array_equal(np.asarray(got.params[k]), np.asarray(params[k]))
        assert got.params[k].sharding == state.params[k].sharding


def test_async_snapshots_are_saved_with_the_state_and_restored_by_count(tmp_path):
    """Asynchronous rollouts' params snapshots (rollouts.py) go in the checkpoint as their own
    item; restored onto the given shardings when their count is the run's, else None (a
    synchronous checkpoint, or a resume that changed rollout.off_policy_steps)."""
    mesh = make_mesh(data=1, fsdp=8)
    state = jax.device_put(_state(), state_shardings(_state(), mesh))
    snaps = tuple(jax.tree.map(lambda x: x + i, {"policy": state.params}) for i in (1, 2))
    ckpt = Checkpointer(str(tmp_path), every_steps=1, max_to_keep=3)
    loop = LoopState(1, 0, np.zeros(2, np.uint32))
    ckpt.maybe_save(1, state, loop)
    ckpt.maybe_save(2, state, loop._replace(step=2), behind=snaps)
    ckpt.close()
    again = Checkpointer(str(tmp_path), every_steps=1, max_to_keep=3)
    like = [abstract_like(snaps[0])] * 2
    assert again.restore_behind(1, like) is None  # saved by a synchronous step
    assert again.restore_behind(2, like[:1]) is None  # another count
    got = again.restore_behind(2, like)
    for a, b in zip(got, snaps):
        np.testing.assert_array_equal(np.asarray(a["policy"]["w"]), np.asarray(b["policy"]["w"]))
        assert a["policy"]["w"].sharding == b["policy"]["w"].sharding
    again.close()


def test_save_restore_roundtrip_onto_fsdp_mesh(tmp_path):
    mesh = make_mesh(data=1, fsdp=8)
    state = jax.device_put(_state(), state_shardings(_state(), mesh))
    ckpt = Checkpointer(str(tmp_path), every_steps=5, max_to_keep=2)
    loop = LoopState(10, 640, np.array([0, 42], np.uint32))
    assert not ckpt.maybe_save(3, state, loop)  # not due
    assert ckpt.maybe_save(10, state, loop)
    ckpt.close()
    again = Checkpointer(str(tmp_path), every_steps=5, max_to_keep=2)
    assert again.latest_step() == 10
    restored, loop2 = again.restore(10, abstract_like(state))
    assert loop2.step == 10 and loop2.problems_consumed == 640
    np.testing.assert_array_equal(loop2.rng_key, loop.rng_key)
    np.testing.assert_array_equal(np.asarray(restored.params["w"]), np.asarray(state.params["w"]))
    assert restored.params["w"].sharding == state.params["w"].sharding
    again.close()


def test_corrupt_checkpoint_names_its_path(tmp_path):
    ckpt = Checkpointer(str(tmp_path), every_steps=1, max_to_keep=2)
    state = _state()
    ckpt.maybe_save(1, state, LoopState(1, 0, np.zeros(2, np.uint32)))
    ckpt.close()
    for root, _, files in os.walk(tmp_path / "checkpoints" / "1" / "state"):
        for f in files:
            with open(os.path.join(root, f), "wb") as fh:
                fh.write(b"garbage")
    again = Checkpointer(str(tmp_path), every_steps=1, max_to_keep=2)
    with pytest.raises(CheckpointError, match=str(tmp_path / "checkpoints" / "1")) as e:
        again.restore(1, abstract_like(state))
    assert "\n" not in str(e.value) and len(str(e.value)) < 500  # one line for the user


def test_a_shared_warm_start_built_twice_at_once_keeps_one_copy(tmp_path):
    """Issue 26: parallel sweep jobs sharing `warmup.shared_dir` both saved the warm start
    into one orbax directory: `Destination ... already exists`, and the sweep failed. Each job
    writes under its own name and renames; the second finds the first's and drops its own; a
    half-written copy left by a killed job is cleared."""
    import jax.numpy as jnp

    shared = tmp_path / "shared" / "key"
    params = {"w": jnp.arange(4.0)}
    a = Checkpointer(str(tmp_path / "a"), 1, 1, str(shared))
    b = Checkpointer(str(tmp_path / "b"), 1, 1, str(shared))
    os.makedirs(b._partial)  # a previous invocation of b died while saving
    a.save_warmstart(params)
    b.save_warmstart({"w": jnp.arange(4.0)})  # the same key: equal params
    assert sorted(os.listdir(shared.parent)) == ["key"]
    restored = read_warmstart_params(str(tmp_path / "b"))  # via the recorded location
    np.testing.assert_array_equal(restored["w"], np.arange(4.0))
    a.close()
    b.close()


_RESTORE_CORRUPT = """
import sys
import jax.numpy as jnp, numpy as np
from rlvr_jax.checkpoint import Checkpointer, CheckpointError, abstract_like
from rlvr_jax.types import LoopState, TrainState
params = {f"w{i}": jnp.full((64, 32), float(i)) for i in range(24)}
state = TrainState(jnp.int32(0), params, {})
ckpt = Checkpointer(sys.argv[1], every_steps=1, max_to_keep=2)
try:
    ckpt.restore(1, abstract_like(state))
except CheckpointError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
"""


def test_a_corrupt_checkpoint_is_one_line_on_the_console(tmp_path):
    """Issue 26: the error line sat between orbax's leftovers (the read's other coroutines,
    never awaited, and TensorStore reads completing into a closed event loop), printed as
    tracebacks around it and at exit."""
    import subprocess
    import sys

    params = {f"w{i}": jnp.full((64, 32), float(i)) for i in range(24)}
    ckpt = Checkpointer(str(tmp_path), every_steps=1, max_to_keep=2)
    ckpt.maybe_save(1, TrainState(jnp.int32(0), params, {}), LoopState(1, 0, np.zeros(2, np.uint32)))
    ckpt.close()
    for root, _, files in os.walk(tmp_path / "checkpoints" / "1" / "state"):
        if os.path.basename(root) == "d":  # the array data, not the metadata
            for f in files:
                with open(os.path.join(root, f), "wb") as fh:
                    fh.write(os.urandom(100))
    proc = subprocess.run([sys.executable, "-c", _RESTORE_CORRUPT, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot restore checkpoint"), proc.stderr[-3000:]
    assert "TensorStore" not in lines[0]
