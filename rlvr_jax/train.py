"""Entry point: `python -m rlvr_jax.train +experiment=math_grpo [key=value ...]`.

Hydra composes conf/ on top of the typed schemas in rlvr_jax/config/; the run directory is
`runs/<name>/<overrides that change the result>` (`default` for none; overrides.txt there
lists every override), so rerunning the same command resumes the
same run. User errors (config, data, paths, checkpoints, the sandbox's host requirements, a run
directory in use) print one message and exit 2; tracebacks are for bugs (or HYDRA_FULL_ERROR=1).
"""

from __future__ import annotations

import os
import shutil
import sys

from rlvr_jax import console

console.quiet_offline()

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
    from rlvr_jax.rewards import InfrastructureFailing
    from rlvr_jax.run_control import RunLocked
    from rlvr_jax.sandbox.bwrap import SandboxUnavailable

    return (config_lib.ConfigError, DatasetError, HFImportError, CheckpointError, RunLocked,
            SandboxUnavailable, FileNotFoundError, InfrastructureFailing)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    global _COMPOSED
    _COMPOSED = True
    # Hydra sets the root logger to INFO: the libraries' loggers are quieted again after it.
    console.quiet_offline()
    OmegaConf.set_struct(cfg, False)
    hc = HydraConfig.get()
    cfg.run_dir = hc.runtime.output_dir
    fresh = not _holds_a_run(cfg.run_dir)  # Hydra made it just now (or an attempt that failed)
    if fresh:  # the command that starts the run; a resume with other keys is refused later
        _write_overrides(cfg.run_dir, list(hc.overrides.task))
    try:
        run_cfg = config_lib.to_run_config(cfg)
        from rlvr_jax import jobs  # after config validation: a bad key fails before JAX starts

        summary = jobs.run(run_cfg)
    except user_errors() as e:
        from rlvr_jax.run_control import RunLocked

        if fresh and not isinstance(e, RunLocked) and not _holds_a_run(cfg.run_dir):
            # A command that failed on its input leaves no run directory behind (only Hydra's
            # bookkeeping would be in it); a directory that holds a run is never touched.
            shutil.rmtree(cfg.run_dir, ignore_errors=True)
            _remove_if_empty(os.path.dirname(os.path.abspath(cfg.run_dir)))
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    # The value a Hydra sweeper would optimise; None for a run stopped early (it resumes).
    return summary.get("eval/sampled_accuracy_end")


_COMPOSED = False  # set once Hydra has composed a config and called main
# What Hydra, this entry point and the run scaffold (its lock, the process count) write into
# a run directory before a run starts in it (run_config.json, checkpoints, metrics).
_BOOKKEEPING = {".hydra", "train.log", "overrides.txt", ".lock", "processes.txt"}


def _holds_a_run(run_dir: str) -> bool:
    """Whether anything but Hydra's bookkeeping is in `run_dir` (a run started there)."""
    return os.path.isdir(run_dir) and bool(set(os.listdir(run_dir)) - _BOOKKEEPING)


def _remove_if_empty(parent: str) -> None:
    """runs/<name> (and runs/ above it) when the removed attempt was all they held."""
    for path in (parent, os.path.dirname(parent)):
        if os.path.basename(path) != "runs" and path != parent:
            break
        try:
            os.rmdir(path)  # only an empty directory goes
        except OSError:
            break


def _write_overrides(run_dir: str, overrides: list) -> None:
    """RUN_DIR/overrides.txt: the command's overrides in full, one a line (the directory's
    name leaves out those that change no result, and cuts long ones)."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "overrides.txt"), "w") as f:
        f.write("".join(f"{o}\n" for o in overrides))


def cli() -> None:
    """`main` as a command. Hydra reports a composition error (an unknown config group or
    key, a bad override) in one line and exits 1; that is the user's error, so exit 2 as for
    the others (1 stays for bugs)."""
    from rlvr_jax.config import cli as cli_checks

    args = sys.argv[1:]
    if "--help" in args or "-h" in args:  # built from what is there (entry points included)
        print(cli_checks.help_text())
        sys.exit(0)
    problem = cli_checks.unknown_override([a for a in args if not a.startswith("-")])
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    try:
        main()
    except SystemExit as e:
        if e.code == 1 and not _COMPOSED:
            sys.exit(2)
        raise


if __name__ == "__main__":
    cli()
