"""What the training command says before Hydra composes anything: `--help` built from what is
there (presets, each group's options, every registered task, environment and evaluation set,
entry points included, and the config's sections), and one line for an override of a key
that does not exist, naming the nearest known keys (Hydra's own message suggests `+key=...`,
which only leads to a second error)."""

from __future__ import annotations

import dataclasses
import difflib
import glob
import os
import textwrap
import typing
from typing import Optional, Sequence

from rlvr_jax.config.load import conf_dir
from rlvr_jax.config.run import RunConfig

GROUPS = ("model", "task", "algo", "sampling", "verifier", "mesh", "logger")

# The config's sections, each with what it holds (conf/README.md has every key).
SECTIONS = {
    "model": "the network, or model.path: a local Hugging Face checkpoint",
    "task": "the problems (task.* of the chosen task)",
    "algo": "GRPO family or PPO: loss, advantages, optimizer, batch (prompts_per_step, ...)",
    "sampling": "temperature, top_k/top_p, max_new_tokens",
    "warmup": "the supervised warm start (steps, learning_rate, shared_dir)",
    "verifier": "how answers are checked (kind, workers, timeout_s, reward_scheme)",
    "env": "multi-turn episodes: kind, tools, call_format, max_turns, session.*",
    "rollout": "asynchronous rollouts (off_policy_steps), sampler_devices",
    "eval": "held-out evaluation: num_problems, every_steps, extra_sets, extra_problems",
    "reward": "reward source: verifier, reward_model, combined (reward_model_dir); weights",
    "distill": "on-policy distillation from a teacher: teacher (run or HF dir), mode, coef",
    "job": "rl (default), reward_model or dpo",
    "mesh": "device mesh: data, fsdp, model",
    "distributed": "several processes: coordinator_address, num_processes, process_id",
    "checkpoint": "every_steps, max_to_keep",
    "logger": "W&B: mode (offline by default), project, entity, progress_bar",
}


def _options(group: str) -> list[str]:
    return sorted(os.path.basename(p)[:-5] for p in glob.glob(f"{conf_dir()}/{group}/*.yaml"))


def help_text() -> str:
    from rlvr_jax.envs import registry as envs
    from rlvr_jax.tasks import registry as tasks

    import yaml

    with open(os.path.join(conf_dir(), "config.yaml")) as f:
        header = yaml.safe_load(f)["hydra"]["help"]["header"].rstrip()
    groups = {g: _options(g) for g in GROUPS}
    groups["task"] = sorted(set(groups["task"]) | set(tasks.specs()))  # entry points too
    wrap = lambda text: textwrap.fill(text, 94, subsequent_indent="    ")
    lines = [header, "", wrap("Presets (+experiment=...): " + ", ".join(_options("experiment"))),
             "Groups (group=option):"]
    lines += [wrap(f"  {g}: {', '.join(opts)}") for g, opts in groups.items()]
    lines += [wrap("Environments (env.kind=...): " + ", ".join(
        [*envs.BUILTIN, *sorted(envs.worlds())]) + " (routed: env.routes=[...])"),
              wrap("Evaluation sets (eval.extra_sets=[...]): "
                   + ", ".join(sorted(tasks.eval_sets()))),
              "Sections (key=value; conf/README.md lists every key):"]
    lines += [f"  {k:12s} {v}" for k, v in SECTIONS.items()]
    lines += ["", "Powered by Hydra (https://hydra.cc); `--cfg job` prints the composed config."]
    return "\n".join(lines)


def _keys(schema, prefix: str = "") -> tuple[set[str], set[str]]:
    """(every leaf key of a dataclass schema, the keys under which any sub-key is free: dict
    fields)."""
    leaves, free = set(), set()
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key, hint = prefix + f.name, hints.get(f.name)
        if dataclasses.is_dataclass(hint):
            sub_leaves, sub_free = _keys(hint, key + ".")
            leaves |= sub_leaves | {key}
            free |= sub_free
        else:
            leaves.add(key)
            if typing.get_origin(hint) in (dict, typing.Dict) or hint is dict:
                free.add(key)
    return leaves, free


def known_keys() -> tuple[set[str], set[str]]:
    from rlvr_jax.tasks import registry as tasks

    leaves, free = _keys(RunConfig)
    leaves.discard("task")
    for spec in tasks.specs().values():
        task_leaves, task_free = _keys(spec.schema, "task.")
        leaves |= task_leaves
        free |= task_free
    return leaves | {"task"}, free


ABBREVIATIONS = {"lr": "learning_rate", "kl": "kl_coef", "temp": "temperature",
                 "steps": "num_steps", "seq_len": "max_new_tokens", "bs": "prompts_per_step"}


def nearest(key: str, leaves: set[str], n: int = 3) -> list[str]:
    """Known keys a mistyped `key` most likely meant: the same last name (or what its
    abbreviation stands for) in the same section first, then the closest spellings."""
    section, last = key.split(".", 1)[0], key.rsplit(".", 1)[-1]
    last = ABBREVIATIONS.get(last, last)
    named = sorted((k for k in leaves if k.rsplit(".", 1)[-1] == last),
                   key=lambda k: (k.split(".", 1)[0] != section, len(k)))
    spelled = difflib.get_close_matches(key, sorted(leaves), n=n, cutoff=0.6)
    return list(dict.fromkeys(named + spelled))[:n]


def unknown_override(overrides: Sequence[str]) -> Optional[str]:
    """The error line for the first override that changes a key no config has, or None.
    Additions (`+key=`), deletions (`~key`), Hydra's own keys and group choices (`task=...`,
    `hydra/launcher=...`) are left to Hydra."""
    leaves, free = None, None
    for override in overrides:
        if override.startswith(("+", "~", "-")) or "=" not in override:
            continue
        key = override.split("=", 1)[0]
        if key.startswith("hydra") or "/" in key or key in GROUPS or key == "experiment":
            continue
        if leaves is None:
            leaves, free = known_keys()
        if key in leaves or any(key.startswith(f + ".") for f in free):
            continue
        hint = f" (did you mean {' or '.join(nearest(key, leaves))}?)" if nearest(
            key, leaves) else ""
        return (f"config key '{key}' does not exist{hint}; `python -m rlvr_jax.train --help` "
                "lists the sections, conf/README.md every key")
    return None
