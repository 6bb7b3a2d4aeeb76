"""Entry point: `python -m rlvr_jax.train +experiment=math_grpo [key=value ...]`.

Hydra composes conf/ on top of the typed schemas in rlvr_jax/config/; the run directory is
`runs/<name>/<overrides that change the result>`, so rerunning the same command resumes the
same run. User errors (config, data, paths, checkpoints, the sandbox's host requirements, a run
directory in use) print one message and exit 2; tracebacks are for bugs (or HYDRA_FULL_ERROR=1).
"""

from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub lookups: they hang ~50 s offline
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# transformers' advice that torch is missing: torch is only a test dependency here.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from rlvr_jax import config as config_lib  # noqa: E402


CONF_DIR = config_lib.conf_dir()
config_lib.register_configs()


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input or a host requirement, not a bug: one line each."""
    from rlvr_jax.checkpoint import CheckpointError
    from rlvr_jax.data.loaders import DatasetError
    from rlvr_jax.models.hf import HFImportError
    from rlvr_jax.run_control import RunLocked
    from rlvr_jax.verify.sandbox import SandboxUnavailable

    return (config_lib.ConfigError, DatasetError, HFImportError, CheckpointError, RunLocked,
            SandboxUnavailable, FileNotFoundError)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    global _COMPOSED
    _COMPOSED = True
    # Hydra sets the root logger to INFO; JAX's backend probing ("no libtpu") is noise there.
    # orbax logs every save step at INFO through absl.
    # orbax also warns through absl about its own metadata files on every resume: noise too.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    logging.getLogger("absl").setLevel(logging.ERROR)
    OmegaConf.set_struct(cfg, False)
    cfg.run_dir = HydraConfig.get().runtime.output_dir
    try:
        run_cfg = config_lib.to_run_config(cfg)
        from rlvr_jax import jobs  # after config validation: a bad key fails before JAX starts

        summary = jobs.run(run_cfg)
    except user_errors() as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    # The value a Hydra sweeper would optimise; None for a run stopped early (it resumes).
    return summary.get("eval/sampled_accuracy_end")


_COMPOSED = False  # set once Hydra has composed a config and called main


def cli() -> None:
    """`main` as a command. Hydra reports a composition error (an unknown config group or
    key, a bad override) in one line and exits 1; that is the user's error, so exit 2 as for
    the others (1 stays for bugs)."""
    try:
        main()
    except SystemExit as e:
        if e.code == 1 and not _COMPOSED:
            sys.exit(2)
        raise


if __name__ == "__main__":
    cli()
