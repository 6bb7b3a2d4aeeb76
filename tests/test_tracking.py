"""Tracking: metrics.jsonl and offline W&B."""

import json
import os

import numpy as np

from rlvr_jax import tracking
from rlvr_jax.tracking import Tracker


def test_tracker_writes_jsonl_and_offline_wandb(tmp_path):
    tr = Tracker(str(tmp_path), mode="offline", project="test", entity=None, name="t",
                 config={"a": 1}, total_steps=2, progress_bar=False)
    tr.start_at(0)
    tr.log(1, {"x": np.float32(0.5), "y": float("nan")})
    tr.advance({"x": 0.5})
    tr.summary({"final": 1.0})
    tr.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "x": 0.5, "y": "nan"}]
    offline = [d for d in os.listdir(tmp_path / "wandb") if d.startswith("offline-run")]
    assert offline, "W&B offline mode should leave a local run directory"


def test_online_wandb_without_a_key_is_one_config_error(tmp_path, monkeypatch):
    """Issue 26: `logger=online` without an API key printed 35 lines of wandb traceback."""
    import pytest

    from rlvr_jax.config import ConfigError

    for var in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login either
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    with pytest.raises(ConfigError, match="logger.mode.*wandb login.*logger.mode=offline") as e:
        tracking.for_process(True, str(tmp_path), mode="online", project="p", entity=None,
                             name="n", config={}, total_steps=1, progress_bar=False)
    assert "\n" not in str(e.value)


def test_the_progress_bar_ends_before_the_closing_lines(tmp_path):
    """Issue 26: the final table was printed into the middle of the progress bar."""
    t = Tracker(str(tmp_path), mode="disabled", project="p", entity=None, name="n", config={},
                total_steps=2, progress_bar=True)
    t.start_at(0)
    t.advance({"acc": 0.5})
    bar = t._bar
    t.end_progress()
    assert t._bar is None and bar.n == 1  # closed after its one step
    t.end_progress()  # idempotent; close() after it too
    t.close()
