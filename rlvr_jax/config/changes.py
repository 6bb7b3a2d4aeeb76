"""What changed between the config a run recorded (RUN_DIR/run_config.json) and the one it is
resumed with. A resume that silently takes another learning rate or group size trains a run
that no config describes; so a change of any key that changes results is refused with a
one-line diff, unless the command asks for it (`allow_config_changes=true`), and then it is
recorded per step range (RUN_DIR/config_changes.jsonl). Pure functions of plain dicts."""

from __future__ import annotations

import json
from typing import Any

# Keys whose value changes no result of the run: where it runs and how it reports, the
# verifier's capacity (verdicts are the same), the device layout (the same maths; a resume on
# more devices is legitimate), how often it checkpoints or evaluates.
NOT_RESULT_CHANGING = ("run_dir", "name", "stop_after_steps", "allow_config_changes", "logger.",
                       "checkpoint.", "verifier.workers", "verifier.timeout_s",
                       "verifier.batch_timeout_s", "verifier.mode", "distributed.", "mesh.",
                       "eval.every_steps", "warmup.shared_dir")
# Model fields read from model.path's config.json: an unresolved config has the preset's.
FROM_MODEL_PATH = ("model.name", "model.vocab_size", "model.hidden_size", "model.num_layers",
                   "model.num_heads", "model.num_kv_heads", "model.head_dim",
                   "model.intermediate_size", "model.rms_norm_eps", "model.qkv_bias",
                   "model.tie_embeddings", "model.rope")
_ABSENT = "<absent>"


def plain(config: dict) -> dict:
    """JSON values, as run_config.json holds them (enums as names, tuples as lists)."""
    return json.loads(json.dumps(config, default=str))


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v}
    return out


def differences(recorded: dict, now: dict, resolved: bool = True) -> list[tuple[str, Any, Any]]:
    """(key, recorded value, new value) for every result-changing key that differs, sorted.
    `resolved`: `now` has the model read from model.path (else its fields are not compared)."""
    a, b = _flat(plain(recorded)), _flat(plain(now))
    skip = NOT_RESULT_CHANGING + (() if resolved or not b.get("model.path") else FROM_MODEL_PATH)
    return [(k, a.get(k, _ABSENT), b.get(k, _ABSENT)) for k in sorted(set(a) | set(b))
            if not k.startswith(skip) and a.get(k, _ABSENT) != b.get(k, _ABSENT)]


def describe(diff: list[tuple[str, Any, Any]], limit: int = 3) -> str:
    """`key: old -> new, ...` for the first `limit` differences (and how many more)."""
    shown = ", ".join(f"{k}: {json.dumps(old)} -> {json.dumps(new)}" for k, old, new in diff[:limit])
    return shown + (f" (and {len(diff) - limit} more)" if len(diff) > limit else "")
