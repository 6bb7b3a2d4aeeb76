"""Tracking: metrics.jsonl and offline W&B."""

import json
import os

import numpy as np

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
