"""`x @ w` for the sampler's decode steps on x86-64 CPUs, as an XLA FFI call (panel_matmul.cc).

Why: a decode step's products have few rows (the batch) against large weights. XLA:CPU hands
them to YNNPACK, which repacks the weight matrix into its own panel layout on every call (the
weights are arguments, not constants) and, below 64 rows, uses a kernel that reads the weights
in place with a 12 KB stride instead. Profiled on the small benchmark model (batch 64), packing
was a quarter of the products' time, and at 32 rows per device the products ran at 18-39
GFLOP/s. Here the weights are packed once per rollout, before the decode loop
(`pack_panels`), and each call streams them once: panels of 16 columns, each [K, 16]
contiguous, held in L1 while every block of 6 rows of x runs over it.

The kernel is C++ compiled on first use with the system compiler (`$CXX`, else `c++`) against
jaxlib's FFI headers, cached under `$RLVR_JAX_CACHE` (default ~/.cache/rlvr_jax) by a hash of
the source, the flags and the jaxlib version. `available()` is False, and callers keep XLA's
product, on anything but x86-64 Linux with AVX2 and FMA, without a compiler, when the build
fails (logged once, with the compiler's message), or with RLVR_JAX_CPU_KERNELS=0.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import jaxlib
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

log = logging.getLogger(__name__)

PANEL = 16  # columns per packed panel (two 8-float AVX registers); must match the .cc
TARGET, PACK_TARGET = "rlvr_panel_matmul", "rlvr_pack_panels"
_SOURCE = Path(__file__).with_name("panel_matmul.cc")
_FLAGS = ["-O3", "-mavx2", "-mfma", "-std=c++17", "-shared", "-fPIC", "-w"]
_lock = threading.Lock()
_status: dict[str, object] = {}  # "ok": bool, "why": str (why not), "lib": the loaded library


def _compiler() -> str:
    return os.environ.get("CXX", "c++")


def unsupported_reason() -> str | None:
    """Why this host cannot run the kernel, or None if it can (the build is not tried here)."""
    if os.environ.get("RLVR_JAX_CPU_KERNELS", "1") == "0":
        return "disabled by RLVR_JAX_CPU_KERNELS=0"
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return f"not an x86-64 Linux host ({platform.system()} {platform.machine()})"
    try:
        flags = next((line.split(":", 1)[1].split() for line in
                      Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError as e:
        return f"cannot read /proc/cpuinfo ({e})"
    missing = [f for f in ("avx2", "fma") if f not in flags]
    if missing:
        return f"CPU lacks {', '.join(missing)}"
    if shutil.which(_compiler()) is None:
        return f"no C++ compiler ({_compiler()} not on PATH)"
    return None


def _build() -> Path:
    """Compile the kernel into the cache (once per source, flags and jaxlib version)."""
    cxx = _compiler()
    key = hashlib.sha256(_SOURCE.read_bytes() + " ".join([cxx] + _FLAGS).encode()
                         + jaxlib.__version__.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("RLVR_JAX_CACHE", Path.home() / ".cache" / "rlvr_jax"))
    out = cache / "kernels" / f"panel_matmul-{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    log.info("building the panel_matmul kernel into %s (once per jaxlib version)", out)
    # Written under a temporary name and renamed: processes building at once never load a
    # half-written library.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        cmd = [cxx, *_FLAGS, f"-I{jax.ffi.include_dir()}", str(_SOURCE), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()[-2000:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def available() -> bool:
    """Build, load and register the kernel on first call; False (logged once) if it cannot."""
    with _lock:
        if "ok" not in _status:
            why = unsupported_reason()
            if why is None:
                try:
                    lib = ctypes.cdll.LoadLibrary(str(_build()))
                    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.RlvrPanelMatmul),
                                                platform="cpu")
                    jax.ffi.register_ffi_target(PACK_TARGET,
                                                jax.ffi.pycapsule(lib.RlvrPackPanels),
                                                platform="cpu")
                    _status["lib"] = lib
                except Exception as e:  # noqa: BLE001 - any failure means XLA's product
                    why = f"build or load failed: {e}"
            _status["ok"], _status["why"] = why is None, why
            if why is not None:
                log.warning("panel_matmul unavailable, decode products stay XLA's: %s", why)
        return bool(_status["ok"])


def why_unavailable() -> str | None:
    """Why `available()` is False (None when it is True or was not asked yet)."""
    return _status.get("why")  # type: ignore[return-value]


def pack_panels(kernel_K_N: jax.Array) -> jax.Array:
    """[K, N] -> [N/16, K, 16]: panel p holds columns 16p .. 16p+15, row by row.

    Through the kernel library when it is `available()` (XLA's transpose of the same took
    44 ms for 50 MB of weights, a plain copy 13 ms), else as a transpose."""
    k, n = kernel_K_N.shape
    if n % PANEL:
        raise ValueError(f"pack_panels needs a multiple of {PANEL} columns, got [{k}, {n}]")
    if kernel_K_N.dtype == jnp.float32 and available():
        out = jax.ShapeDtypeStruct((n // PANEL, k, PANEL), jnp.float32)
        return jax.ffi.ffi_call(PACK_TARGET, out)(kernel_K_N)
    return jnp.transpose(kernel_K_N.reshape(k, n // PANEL, PANEL), (1, 0, 2))


def _call(x_M_K: jax.Array, w_P_K_16: jax.Array) -> jax.Array:
    """The FFI call on whole (or per-device) arrays: y [M, P, 16]."""
    out = jax.ShapeDtypeStruct((x_M_K.shape[0], w_P_K_16.shape[0], PANEL), jnp.float32)
    return jax.ffi.ffi_call(TARGET, out)(x_M_K, w_P_K_16)


# Under a sharded jit, each device runs the call on its rows of x and its panels of w (both
# kept as they come: data-parallel rows, column-parallel panels); K, the contraction, is never
# split (an operand sharded along it is gathered first). Without this rule XLA gathers x whole
# onto every device around the call.
_partitioned = custom_partitioning(_call)


def _shardings(mesh, arg_shapes):
    """(x, w, y) shardings: x's rows and w's panels as they come, unless both use one mesh
    axis (then w is gathered); never K."""
    x_spec, w_spec = (tuple(a.sharding.spec) + (None,) * 3 for a in arg_shapes)
    axes = lambda entry: set() if entry is None else {entry} if isinstance(entry, str) else set(entry)
    rows, panels = x_spec[0], None if axes(x_spec[0]) & axes(w_spec[0]) else w_spec[0]
    return (NamedSharding(mesh, PartitionSpec(rows, None)),
            NamedSharding(mesh, PartitionSpec(panels, None, None)),
            NamedSharding(mesh, PartitionSpec(rows, panels, None)))


def _infer(mesh, arg_shapes, result_shape):
    return _shardings(mesh, arg_shapes)[2]


def _partition(mesh, arg_shapes, result_shape):
    x_sharding, w_sharding, y_sharding = _shardings(mesh, arg_shapes)
    return mesh, _call, y_sharding, (x_sharding, w_sharding)


_partitioned.def_partition(partition=_partition, infer_sharding_from_operands=_infer,
                           sharding_rule="m k, p k j -> m p j")


def panel_matmul(x_M_K: jax.Array, w_P_K_16: jax.Array) -> jax.Array:
    """x [M, K] @ w [K, N], w packed by `pack_panels`; float32 only. Call `available()` first."""
    (m, k), (p, k2, panel) = x_M_K.shape, w_P_K_16.shape
    if (k, panel) != (k2, PANEL) or x_M_K.dtype != jnp.float32 or w_P_K_16.dtype != jnp.float32:
        raise ValueError(f"panel_matmul: x {x_M_K.dtype}[{m}, {k}] and w {w_P_K_16.dtype}"
                         f"[{p}, {k2}, {panel}] (float32 [M, K] and [N/{PANEL}, K, {PANEL}])")
    return _partitioned(x_M_K, w_P_K_16).reshape(m, p * PANEL)
