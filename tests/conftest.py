"""Test setup: 8 fake CPU devices for sharding tests, strict rank promotion, no hub lookups, and
JAX's persistent compilation cache (a second run of the suite skips most compiles; the
subprocess end-to-end tests share it through the environment). XLA_FLAGS and the cache settings
must be in place before JAX initialises, so this runs at import time."""

import os

# The tests' programs are tiny: compiling them costs far more than running them. LLVM's
# optimisations off (a tiny run: 34 -> 23 CPU seconds), and XLA:CPU's MLIR fusion emitters off
# (its older emitters compile the same fusions in less than half the time: 41 -> 18 s of
# backend compiles over 107 update programs of tests/test_train_step.py, cold cache). Compiler
# settings only, the same on every side of each comparison. Subprocesses inherit these flags
# (tests/helpers.py: xla_env).
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8"
                           " --xla_backend_optimization_level=0"
                           " --xla_llvm_disable_expensive_passes=true"
                           " --xla_cpu_use_fusion_emitters=false").strip()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "rlvr_jax", "jax-tests"))
# Cache every compile that takes over 0.2 s (the default, 1 s, leaves out most of ours).
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

# The graders' kinds register with the sandbox package when rlvr_jax.verify is imported (the
# package imports none of its plug-ins); tests that build a pool directly rely on this.
import rlvr_jax.verify  # noqa: E402,F401


# The longest tests first (longest-processing-time order): with `-n auto` the two workers then
# start on the 2-process runs and finish on short tests together, instead of one worker
# starting a five-minute test when the other is nearly done. Order only; nothing is skipped.
_LONGEST_FIRST = ("tests/test_distributed.py", "tests/test_run_control.py::test_sigterm",
                  "tests/test_run_control.py::test_a_built_wheel",
                  "tests/test_loop.py::test_resume")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        for i, prefix in enumerate(_LONGEST_FIRST):
            if item.nodeid.startswith(prefix):
                return i
        return len(_LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)

    items.sort(key=rank)  # stable: file order within each rank


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker more than this process's cores. With one per core, a 2-core run
    left ~19% of its core time idle (tests waiting on sandbox timeouts, heartbeats and their
    subprocesses); a third worker fills it."""
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")  # not on macOS
             else os.cpu_count() or 1)
    return cores + 1
