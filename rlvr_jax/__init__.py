"""rlvr_jax: reinforcement learning with verifiable rewards for language models, in JAX.

From Python, the same run the command line makes:

    import rlvr_jax
    cfg = rlvr_jax.compose(["+experiment=math_grpo", "num_steps=10"], run_dir="runs/nb")
    summary = rlvr_jax.run(cfg)                     # resumes what is in run_dir
    result = rlvr_jax.evaluate_model("runs/nb", None, n=4, ks=[1, 4], temperature=1.0,
                                     max_new_tokens=5, num_problems=100, batch=64)

`compose` uses Hydra's compose API over the package's conf/, so a config built here equals the
CLI's (defaults, presets, checks). JAX is imported only when `run` or `evaluate_model` is used.
"""

from rlvr_jax.config import ConfigError, RunConfig, compose

__all__ = ["compose", "run", "evaluate_model", "RunConfig", "ConfigError"]


def __getattr__(name):
    if name == "run":
        from rlvr_jax.jobs import run

        return run
    if name == "evaluate_model":
        from rlvr_jax.evaluate import evaluate_model

        return evaluate_model
    raise AttributeError(f"module 'rlvr_jax' has no attribute {name!r}")
