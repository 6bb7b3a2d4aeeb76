"""Each sweep's record beside its runs. A preset's sweeps share `multirun/<name>` (its runs
are siblings there, and rerunning a sweep resumes its runs), and Hydra rewrites that folder's
multirun.yaml at every sweep; so each sweep also keeps its own copy,
`multirun/<name>/sweeps/<its overrides>.yaml` (the same command: the same file)."""

from __future__ import annotations

import os
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rlvr_jax.config.load import run_dirname


def sweep_record_path(sweep_dir: str, overrides: list[str]) -> str:
    return os.path.join(sweep_dir, "sweeps", f"{run_dirname(','.join(overrides))}.yaml")


class SweepRecord(Callback):
    """Registered in conf/config.yaml (`hydra.callbacks`)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        path = sweep_record_path(str(config.hydra.sweep.dir), list(config.hydra.overrides.task))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        OmegaConf.save(config, path)
