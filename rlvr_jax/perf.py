"""Model FLOPs utilisation (MFU): the matmul FLOPs a jitted program does, over its wall time
and the peak of the devices it ran on (Chowdhery et al. 2022, PaLM, appendix B).

FLOPs are counted on the program's jaxpr: each `dot_general` is 2 x (output size) x
(contracted size); a scan's body counts `length` times, a while loop's body as many times as
the caller says it ran. Not XLA's `cost_analysis()`: it counts a loop body once whatever its
trip count, so it undercounts the decoder's scanned layers N-fold (tests/test_perf.py shows
both). What the program does is counted, so recomputation under `model.remat` is included
(hardware FLOPs); elementwise work is not.

Peaks (`peak_flops`) are dense bfloat16 FLOP/s per chip from the vendors' datasheets; a
CPU's is measured, as CPUs have no datasheet number that means the same thing: the best
float32 matmul rate of a short probe at the run's start (before the warm start or any
sampling; recorded in run_config.json as `host.peak_flops`), raised to any higher rate a
program of the run is seen to reach (a probe under load underestimates the machine), so an
MFU is at most 1 on every device kind. `perf/mfu_*` are relative to that peak.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore

# device_kind substring -> dense bf16 FLOP/s per chip; the longest matching key wins
PEAK_FLOPS: dict[str, float] = {
    "H200": 989e12, "H100": 989e12, "H800": 989e12, "GH200": 989e12, "B200": 2250e12,
    "A100": 312e12, "A800": 312e12, "L40S": 362e12, "L4": 121e12, "A10": 125e12,
    "TPU v4": 275e12, "TPU v5 lite": 197e12, "TPU v5e": 197e12, "TPU v5p": 459e12,
    "TPU v5": 459e12, "TPU v6 lite": 918e12, "TPU v6e": 918e12,
}


def _closed_jaxprs(value: Any):
    if isinstance(value, jcore.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, jcore.Jaxpr):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _closed_jaxprs(v)


def jaxpr_flops(jaxpr, while_trips: int = 1) -> float:
    """Matmul FLOPs of a (closed) jaxpr; every while loop's body counts `while_trips` times."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            out = eqn.outvars[0].aval.shape
            total += 2.0 * math.prod(out) * math.prod(lhs[i] for i in lhs_contract)
        elif name == "scan":
            total += eqn.params["length"] * jaxpr_flops(eqn.params["jaxpr"], while_trips)
        elif name == "while":
            total += while_trips * (jaxpr_flops(eqn.params["body_jaxpr"], while_trips)
                                    + jaxpr_flops(eqn.params["cond_jaxpr"], while_trips))
        elif name == "cond":  # one branch runs: count the dearest
            total += max(jaxpr_flops(b, while_trips) for b in eqn.params["branches"])
        else:  # pjit, remat, custom_jvp/vjp calls, shard_map: their inner jaxprs, once
            for value in eqn.params.values():
                for inner in _closed_jaxprs(value):
                    total += jaxpr_flops(inner, while_trips)
    return total


def traced_flops(jitted, *args, while_trips: int = 1) -> float:
    """FLOPs of a jitted function at these arguments. `jit(...).trace` reuses the trace of an
    earlier call with the same arguments (no retrace, so no extra compile is counted)."""
    return jaxpr_flops(jitted.trace(*args).jaxpr, while_trips)


def sampler_flops_per_row(model, params: Any, prompt_len: int, max_new_tokens: int
                          ) -> tuple[float, float]:
    """(prefill FLOPs, one decode step's FLOPs) for one row of the sampler at these sizes;
    matmul FLOPs are linear in the rows, and the token draw does no matmul."""
    from rlvr_jax.models.kv_cache import KVCache

    cfg = model.cfg
    slots = prompt_len + max_new_tokens
    sds = jax.ShapeDtypeStruct
    shapes = jax.tree.map(lambda x: sds(x.shape, x.dtype), params)
    apply = lambda method, p, *a: model.apply({"params": p}, *a, method=method)
    prompt = sds((1, prompt_len), jnp.int32)
    prefill = jax.make_jaxpr(lambda p, t, m: apply("prefill", p, t, m, slots))(shapes, prompt,
                                                                               prompt)
    kv = (sds((1, slots, cfg.num_kv_heads, cfg.resolved_head_dim),
              jnp.dtype(cfg.compute_dtype)),) * cfg.num_layers
    half = sds((1, cfg.resolved_head_dim // 2), jnp.float32)
    decode = jax.make_jaxpr(lambda p, *a: apply("decode_step", p, *a, prompt_len))(
        shapes, sds((1,), jnp.int32), sds((1,), bool), (half, half),
        KVCache(kv, kv, sds((1, slots), bool)))
    return jaxpr_flops(prefill), jaxpr_flops(decode)


def decode_steps(mask_B_R: np.ndarray, chunks: int, max_new_tokens: int) -> list[tuple[int, int]]:
    """(rows, decode forwards) of each sampler call of a rollout sampled in `chunks` calls:
    a call runs one forward per token drawn in its loop, until its longest row ends, at most
    max_new_tokens - 1 (the last token needs none)."""
    out = []
    for part in np.array_split(np.asarray(mask_B_R), chunks):
        longest = int(part.sum(axis=1).max()) if len(part) else 0
        out.append((len(part), min(longest, max_new_tokens - 1)))
    return out


def rollout_flops(per_row: tuple[float, float], calls: Sequence[tuple[int, int]],
                  group_size: int = 1) -> float:
    """A rollout's sampler FLOPs from `sampler_flops_per_row` and `decode_steps`; with rows in
    groups of `group_size` identical prompts, each prompt is prefilled once."""
    prefill, decode = per_row
    return sum(rows / group_size * prefill + rows * steps * decode for rows, steps in calls)


_MEASURED: dict[str, float] = {}  # a CPU's peak (per device kind), probed then raised


def peak_flops(device_kind: str, platform: str) -> float | None:
    """One chip's peak FLOP/s: the table for accelerators, measured for a CPU (probed once,
    raised by `mfu` to any higher rate seen); None for an accelerator the table does not
    know (MFU is then not reported)."""
    if platform == "cpu":
        if device_kind not in _MEASURED:
            _MEASURED[device_kind] = _measure_cpu()
        return _MEASURED[device_kind]
    return datasheet_peak(device_kind)


@functools.lru_cache(maxsize=None)
def datasheet_peak(device_kind: str) -> float | None:
    matches = [k for k in PEAK_FLOPS if k.lower() in device_kind.lower()]
    return PEAK_FLOPS[max(matches, key=len)] if matches else None


def peak_source(platform: str) -> str:
    """What `peak_flops` is, in words (the run record says it beside the number)."""
    return ("the best float32 matmul rate measured on this machine (a probe at the run's "
            "start, raised to any higher rate the run reached)" if platform == "cpu"
            else "the chip's dense bfloat16 datasheet figure")


def _measure_cpu(sizes: Sequence[int] = (512, 1024, 2048), reps: int = 3) -> float:
    best = 0.0
    for n in sizes:
        a = jnp.ones((n, n), jnp.float32)
        mm = jax.jit(lambda x: x @ x)
        mm(a).block_until_ready()
        for _ in range(reps):
            t0 = time.perf_counter()
            mm(a).block_until_ready()
            best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0))
    return best


def mfu(flops: float, seconds: float, devices: Sequence[jax.Device]) -> float | None:
    """flops / (seconds x the devices' summed peak), at most 1; None when a peak is unknown.
    A CPU that runs a program faster than its probe said has that rate as its peak."""
    d = devices[0]
    peak = peak_flops(d.device_kind, d.platform)
    if peak is None or seconds <= 0:
        return None
    rate = flops / (seconds * len(devices))
    if d.platform == "cpu" and rate > peak:
        _MEASURED[d.device_kind] = peak = rate
    return rate / peak
