"""Entry point: `python -m rlvr_jax.train +experiment=math_grpo [key=value ...]`.

Hydra composes conf/ on top of the typed schemas in rlvr_jax/config.py; the run directory is
`runs/<name>/<overrides>`, so rerunning the same command resumes the same run.
"""

from __future__ import annotations

import logging
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub lookups: they hang ~50 s offline
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from rlvr_jax import config as config_lib  # noqa: E402

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
config_lib.register_configs()


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    # Hydra sets the root logger to INFO; JAX's backend probing ("no libtpu") is noise there.
    # orbax logs every save step at INFO through absl.
    for name in ("jax._src.xla_bridge", "absl"):
        logging.getLogger(name).setLevel(logging.WARNING)
    OmegaConf.set_struct(cfg, False)
    cfg.run_dir = HydraConfig.get().runtime.output_dir
    run_cfg = config_lib.to_run_config(cfg)
    from rlvr_jax import loop  # after config validation: a bad key fails before JAX starts

    summary = loop.run(run_cfg)
    return summary["eval/sampled_accuracy_end"]  # the value a Hydra sweeper would optimise


if __name__ == "__main__":
    main()
