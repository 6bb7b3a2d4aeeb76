"""The jobs a run can be (`job=`), side by side over one run scaffold (run_scaffold.py), and
the dispatch the entry points share (`python -m rlvr_jax.train`, `rlvr_jax.run`):

    rl            the RL loop (loop.py)
    reward_model  a reward model on preference pairs (preference_runs.py)
    dpo           DPO on preference pairs (preference_runs.py)

No job imports another: a new one (an asynchronous RL loop) is one more line here.
"""

from __future__ import annotations

from rlvr_jax.config import RunConfig


def table() -> dict:
    """`job=` -> the job (imported on use: JAX starts only once a config has validated)."""
    from rlvr_jax import loop, preference_runs

    return {"rl": loop.run, "reward_model": preference_runs.run, "dpo": preference_runs.run}


def run(cfg: RunConfig) -> dict:
    """The run's life (run directory, lock, signals, watchdog, the finished-run check), then
    its job. Returns the summary, or {"stopped_at_step": k, ...} when stopped early."""
    from rlvr_jax import run_scaffold

    return run_scaffold.run(cfg, table())
