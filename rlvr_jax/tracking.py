"""The only file that imports wandb.

Every logged row goes to `metrics.jsonl` in the run directory (always), to W&B (offline by
default: no network, nothing hangs; `logger.mode=online` to sync) and to a console progress bar.
On resume the W&B run id stored in the run directory is reused, and metrics.jsonl keeps the
rows up to the restored step (`truncate_after`), so every step appears once. Lines for people go
through `logging` (Hydra writes them to the run's train.log as well as the console) or, when
nothing configured logging (a notebook, a test), to the console.
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from typing import Any, Mapping, Optional

from tqdm import tqdm

_LOG = logging.getLogger("rlvr_jax")


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class Tracker:
    def __init__(self, run_dir: str, *, mode: str, project: str, entity: Optional[str], name: str,
                 config: Mapping[str, Any], total_steps: int, progress_bar: bool):
        self.run_dir = run_dir
        self._jsonl = open(os.path.join(run_dir, "metrics.jsonl"), "a", buffering=1)
        self._wandb = None
        if mode != "disabled":
            import wandb

            id_path = os.path.join(run_dir, "wandb_run_id")
            if not os.path.exists(id_path):
                with open(id_path, "w") as f:
                    f.write(uuid.uuid4().hex[:12])
            with open(id_path) as f:
                run_id = f.read().strip()
            try:
                self._wandb = wandb.init(project=project, entity=entity, name=name, id=run_id,
                                         resume="allow", mode=mode, dir=run_dir,
                                         config=dict(config))
            except (wandb.errors.UsageError, wandb.errors.AuthenticationError,
                    wandb.errors.CommError) as e:
                from rlvr_jax.config import ConfigError

                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError(f"config key 'logger.mode': W&B mode {mode!r} could not "
                                  f"start ({first}); log in (`wandb login` or WANDB_API_KEY), "
                                  "or use logger.mode=offline (sync later with `wandb sync`)"
                                  ) from None
        self._bar_args = dict(total=total_steps, desc="rl", dynamic_ncols=True,
                              disable=not progress_bar)
        self._bar: Optional[tqdm] = None  # created when the RL steps start

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        row = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self._jsonl.write(json.dumps(row) + "\n")
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in row.items() if k != "step"}, step=step)

    def start_at(self, step: int) -> None:
        """Show the progress bar from `step` (the restored step when resuming)."""
        self._bar = tqdm(initial=step, **self._bar_args)

    def advance(self, postfix: Mapping[str, float]) -> None:
        assert self._bar is not None, "call start_at before advance"
        self._bar.update(1)
        self._bar.set_postfix({k: f"{v:.3f}" for k, v in postfix.items()}, refresh=False)

    def end_progress(self) -> None:
        """Close the progress bar once the steps are done, so the lines after them (the final
        evaluation, the table) are not printed into it."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def write(self, text: str) -> None:
        """A line for people: through `logging` when it is configured (Hydra: console and
        train.log), else printed without breaking the progress bar."""
        if logging.getLogger().handlers:
            _LOG.info(text)
        else:
            tqdm.write(text)

    def truncate_after(self, step: int) -> None:
        """Drop metrics.jsonl rows of steps after `step` (a resumed run logs them again)."""
        path = self._jsonl.name
        self._jsonl.close()
        with open(path) as f:
            rows = [line for line in f if line.strip()]
        kept = [line for line in rows if json.loads(line).get("step", 0) <= step]
        if len(kept) != len(rows):
            with open(path + ".tmp", "w") as f:
                f.writelines(kept)
            os.replace(path + ".tmp", path)
        self._jsonl = open(path, "a", buffering=1)

    def summary(self, values: Mapping[str, Any]) -> None:
        if self._wandb is not None:
            for k, v in values.items():
                self._wandb.summary[k] = _jsonable(v)

    def close(self) -> None:
        self.end_progress()
        self._jsonl.close()
        if self._wandb is not None:
            self._wandb.finish()


class NullTracker:
    """The Tracker of a process that is not the run's writer (distributed.py): it logs
    nothing; its errors still reach its own stderr."""

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        pass

    def start_at(self, step: int) -> None:
        pass

    def end_progress(self) -> None:
        pass

    def advance(self, postfix: Mapping[str, float]) -> None:
        pass

    def write(self, text: str) -> None:
        pass

    def truncate_after(self, step: int) -> None:
        pass

    def summary(self, values: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def for_process(is_writer: bool, run_dir: str, **tracker_args) -> Tracker | NullTracker:
    """The run's Tracker on its writer process, a NullTracker on the others."""
    return Tracker(run_dir, **tracker_args) if is_writer else NullTracker()
