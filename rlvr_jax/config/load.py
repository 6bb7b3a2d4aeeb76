"""From Hydra (or a dict) to a validated RunConfig: registration, composition, validation,
and the run's derived names (its directory, its warm-start key)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import typing
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from rlvr_jax.config.choices import ConfigError, _check
from rlvr_jax.config.run import (LEARNED_REWARD_KL_COEF, LoggerConfig, MeshConfig, RunConfig,
                                 VerifierConfig)
from rlvr_jax.config.schemas import (AlgoConfig, ModelConfig,
                                     SamplingConfig)


def warmstart_key(cfg: "RunConfig") -> str:
    """A stable name for the warm start `cfg` would train (see WarmupConfig.shared_dir)."""
    import json

    w = dataclasses.asdict(cfg.warmup)
    w.pop("shared_dir")
    key = {"seed": cfg.seed, "model": dataclasses.asdict(cfg.model), "warmup": w,
           "task": dataclasses.asdict(cfg.task), "max_new_tokens": cfg.sampling.max_new_tokens}
    if cfg.env.kind != "none":  # the demonstrations call tools (keys of one-turn runs kept)
        e = cfg.env
        key["env"] = {"tools": _env_tools(e), "call_format": str(e.call_format),
                      "demo_tool_fraction": e.demo_tool_fraction,
                      "observation_tokens": e.observation_tokens}
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _env_tools(e) -> list:
    """The tools the warm start's demonstrations may call (the world's, for a stateful
    environment; a wrapper changes none)."""
    from rlvr_jax.envs import registry

    if e.kind == "routed":
        return [t for name in e.routes for t in _env_tools(dataclasses.replace(e, kind=name))]
    if e.kind in ("tools",) or ":" in e.kind:
        return list(e.tools)
    return list(registry.world(e.kind).tools)


def run_dirname(overrides: str, max_chars: int = 120) -> str:
    """A directory name for a list of overrides: deterministic (the same command resumes the same
    run), a single path component, and short enough for any filesystem (255 bytes; a long one
    is cut and hashed, and the run directory's overrides.txt holds them in full). The plain
    command's run is `default`, a sibling of the others (deleting it deletes no other run)."""
    if not overrides:
        return "default"
    name = overrides.replace("/", "_").replace(os.sep, "_")
    if len(name) > max_chars:
        digest = hashlib.sha1(overrides.encode()).hexdigest()[:10]
        name = f"{name[: max_chars - 11]}~{digest}"
    return name


_REGISTERED: dict[int, tuple] = {}  # the ConfigStore -> the tasks whose schemas it holds


def register_configs() -> None:
    """Register the schemas so `conf/config.yaml` composes on top of them (struct mode), and the
    `run_dirname` resolver used by hydra.run.dir / hydra.sweep.subdir."""
    from rlvr_jax.tasks import registry  # each task module declares its schema

    if not OmegaConf.has_resolver("run_dirname"):
        OmegaConf.register_new_resolver("run_dirname", run_dirname)
    cs = ConfigStore.instance()
    # Storing converts every schema to a config (~0.2 s): once per set of tasks, the store
    # being the process's own. A task registered since (a plugin, a user's) stores them again.
    tasks = tuple((name, spec.schema) for name, spec in registry.specs().items())
    if _REGISTERED.get(id(cs)) == tasks:
        return
    cs.store(name="run_schema", node=RunConfig)
    for group, node in [("model", ModelConfig), ("sampling", SamplingConfig),
                        ("algo", AlgoConfig), ("verifier", VerifierConfig), ("mesh", MeshConfig),
                        ("logger", LoggerConfig)]:
        cs.store(group=group, name=f"{group}_schema", node=node)
    for name, spec in registry.specs().items():
        cs.store(group="task", name=f"{name}_schema", node=spec.schema)
        if not os.path.exists(os.path.join(conf_dir(), "task", f"{name}.yaml")):
            # A task registered from outside the package (an `rlvr_jax.tasks` entry point) is
            # selected by its name, `task=NAME`, with its schema's defaults: no conf file.
            node = spec.schema()
            if hasattr(node, "name"):
                node.name = name
            cs.store(group="task", name=name, node=node)
    _REGISTERED[id(cs)] = tasks


def validate(cfg: RunConfig) -> RunConfig:
    """Each part's checks, then the constraints between parts; every error names its key."""
    from rlvr_jax.tasks import registry  # noqa: F811 (tasks import this package's choices)

    m, t, a, w, v = cfg.model, cfg.task, cfg.algo, cfg.warmup, cfg.verifier
    cfg.reward.check()
    if a.loss.kl_coef == -1:  # by the reward source: resolved once, here
        a.loss.kl_coef = 0.0 if cfg.reward.source == "verifier" else LEARNED_REWARD_KL_COEF
    m.check()
    t.check()
    cfg.sampling.check()
    a.check(cfg.sampling.max_new_tokens)
    w.check()
    v.check()
    cfg.env.check()
    cfg.fleet.check()
    for key, backend in (("verifier.backend", v.backend), ("env.backend", cfg.env.backend)):
        if backend == "ray":
            import importlib.util

            _check(importlib.util.find_spec("ray") is not None, key,
                   f"ray needs the Ray extra: pip install -e '.[ray]' (or {key}=local)")
    _check(v.backend != "ray" or v.kind != "inprocess", "verifier.backend", "verifier.kind="
           "inprocess checks in the trainer process: a Ray fleet runs pool kinds (math, code)")
    if cfg.env.backend == "ray" and cfg.fleet.max_sessions:
        # A stream waits for an episode's session when it inserts it (never on a timer: runs
        # repeat), holding the sessions of every episode started and not ended: a cap under
        # that would wait forever. Lock step opens a process's whole batch at once.
        st, procs = cfg.rollout.stream, max(cfg.distributed.num_processes, 1)
        batch = a.prompts_per_step * a.samples_per_prompt // procs
        held_out = cfg.eval.sequences_per_batch // procs  # an evaluation's batch
        need = max(batch * (1 + st.carry_batches), held_out) + (2 * st.inserts if st.rows else 0)
        _check(cfg.fleet.max_sessions // procs >= need, "fleet.max_sessions",
               f"must be 0 or >= {need * procs} ({procs} process(es) x {need}: a process's "
               "episodes that can be open at once, its training or evaluation batch, with a "
               "stream also the batches carried and the inserts opened ahead)")
    _check(cfg.env.backend != "ray" or (cfg.env.kind not in ("none", "tools", "routed")
                                        and ":" not in cfg.env.kind), "env.backend",
           "a Ray fleet holds a stateful kind's sessions (python_repl, workspace, api, ...)")
    if cfg.env.kind != "none":
        _check(cfg.job == "rl", "env.kind", f"job={cfg.job} has no episodes: set env.kind=none")
    _check(a.gigpo.weight == 0 or cfg.env.kind != "none", "algo.gigpo.weight",
           "step-level groups need multi-turn episodes (env.kind); with one turn every step "
           "group is the episode group")
    cfg.rollout.check()
    _check(cfg.rollout.stream.rows == 0 or cfg.env.kind != "none", "rollout.stream.rows",
           "streams multi-turn episodes: set env.kind (one-turn batches are sampled whole)")
    if cfg.rollout.stream.carry_batches:  # a step's batch is one record of the stream's
        _check(v.overlap_chunks == 1, "verifier.overlap_chunks",
               "must be 1 with rollout.stream.carry_batches (a batch streams whole)")
        _check(cfg.reward.source == "verifier", "reward.source", "a reward model does not "
               "score carried episodes yet: set rollout.stream.carry_batches=0")
    cfg.mesh.check()
    cfg.distributed.check()
    cfg.preferences.check()
    cfg.reward_model.check()
    cfg.distill.check()
    _check(not cfg.distill.teacher or cfg.job == "rl", "distill.teacher",
           f"job={cfg.job} samples nothing to distil: distillation is an RL run's")
    cfg.dpo.check()
    cfg.checkpoint.check()
    cfg.eval.check()
    _check(cfg.num_steps >= 0, "num_steps", "must be >= 0")
    _check(cfg.stop_after_steps >= 0, "stop_after_steps", "must be >= 0 (0: no limit)")
    if a.adv_estimator == "maxrl":
        from rlvr_jax.rewards import REWARD_TABLES

        _check(min(REWARD_TABLES[str(v.reward_scheme)].values()) >= 0
               and cfg.reward.source == "verifier" and a.dapo.overlong_buffer_tokens == 0,
               "algo.adv_estimator", "maxrl weighs each prompt by 1 / its pass rate, so it needs "
               "rewards >= 0: verifier.reward_scheme=binary or graded, reward.source=verifier, "
               f"no overlong penalty (here: {v.reward_scheme}, {cfg.reward.source}, "
               f"algo.dapo.overlong_buffer_tokens={a.dapo.overlong_buffer_tokens})")
    spec = registry.get(t.name)
    from rlvr_jax import rewards  # numpy only

    rewards.component_weights(reward_components(cfg), cfg.reward.weights,
                              cfg.reward.reward_model_weight)  # names each key, or refuses
    _check(v.kind in spec.verifiers, "verifier.kind",
           f"task={t.name} is checked by verifier={' or '.join(spec.verifiers)}, not {v.kind}")
    _check(a.dapo.sampled_prompts(a.prompts_per_step) % v.overlap_chunks == 0,
           "verifier.overlap_chunks", "must divide the sampled prompts per step")
    _check(m.lora_rank == 0 or a.name != "ppo", "model.lora_rank",
           "LoRA trains the GRPO family's policy; algo=ppo's critic needs full weights "
           "(set model.lora_rank=0)")
    _check(m.lora_rank == 0 or cfg.job == "rl", "model.lora_rank",
           f"job={cfg.job} trains full weights (LoRA adapters train the RL policy only): set "
           "model.lora_rank=0")
    if spec.environment:
        e = cfg.env
        _check(e.kind == spec.environment or (e.kind == "routed" and spec.environment in
                                              e.routes), "env.kind",
               f"task={t.name} runs in env.kind={spec.environment}, not {e.kind}")
    if not spec.demonstrations:
        _check(bool(m.path) or w.steps == 0, "model.path",
               f"task={t.name} has no demonstrations for a warm start: set model.path to a "
               "Hugging Face directory (or warmup.steps=0)")
    return cfg


def reward_components(cfg: RunConfig) -> tuple[str, ...]:
    """The run's reward components, in order (rlvr_jax/rewards.py)."""
    from rlvr_jax import rewards
    from rlvr_jax.tasks import registry

    return rewards.component_names(
        source=str(cfg.reward.source), overlong=cfg.algo.dapo.overlong_buffer_tokens > 0,
        episodes=cfg.env.kind != "none", parts=registry.get(cfg.task.name).reward_parts)


def _unknown_keys(node: Any, schema: type, prefix: str = "") -> list[str]:
    """Keys present in `node` that the dataclass `schema` does not declare (recursively).

    Needed because Hydra's `+key=value` appends past struct mode, and OmegaConf.to_object then
    drops the stray key silently: a typo would be ignored instead of reported."""
    types = typing.get_type_hints(schema)  # the annotations are strings (future annotations)
    out = []
    for key in node.keys():
        if key not in types:
            out.append(prefix + str(key))
            continue
        sub_type = types[key]
        if dataclasses.is_dataclass(sub_type) and isinstance(node[key], (DictConfig, dict)):
            out += _unknown_keys(node[key], sub_type, f"{prefix}{key}.")
    return out


def _task_schema(node: Any) -> type:
    from rlvr_jax.tasks import registry

    name = node.get("name", "arithmetic") if node is not None else "arithmetic"
    return registry.get(str(name)).schema


@functools.lru_cache(maxsize=None)
def _structured(schema: type) -> DictConfig:
    """A schema as a config, built once: OmegaConf.merge copies its first argument."""
    return OmegaConf.structured(schema)


def to_run_config(cfg: DictConfig | RunConfig | dict[str, Any]) -> RunConfig:
    """Hydra's DictConfig (or a plain dict of overrides) -> validated dataclass instance
    (OmegaConf checks types on the way)."""
    if isinstance(cfg, RunConfig):
        return validate(cfg)
    if isinstance(cfg, dict):
        cfg = OmegaConf.create(cfg)
    task = cfg.get("task")
    task = None if task == MISSING else task
    schema = _task_schema(task)
    unknown = _unknown_keys(cfg, RunConfig) + (
        _unknown_keys(task, schema, "task.") if task is not None else [])
    if unknown:
        raise ConfigError(f"unknown config key(s): {', '.join(unknown)}")
    cfg = OmegaConf.merge(cfg, {"task": OmegaConf.merge(_structured(schema),
                                                        task if task is not None else {})})
    merged = OmegaConf.merge(_structured(RunConfig), cfg)
    obj = OmegaConf.to_object(merged)
    assert isinstance(obj, RunConfig) and isinstance(obj.task, schema)
    return validate(obj)


def recorded_model_config(model: dict) -> ModelConfig:
    """The ModelConfig a run recorded in its run_config.json (keys a later version dropped
    are ignored)."""
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    return ModelConfig(**{k: v for k, v in model.items() if k in names})


def as_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain JSON-able values (choices as their names)."""
    return dataclasses.asdict(cfg)


def conf_dir() -> str:
    """conf/ at the top of the repository (a checkout or an editable install), else the copy
    shipped inside the installed package (`rlvr_jax.conf`, see pyproject.toml)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # rlvr_jax/
    repo = os.path.join(os.path.dirname(here), "conf")
    if os.path.isfile(os.path.join(repo, "config.yaml")):
        return repo
    return os.path.join(here, "conf")


def compose(overrides: Sequence[str] = (), run_dir: str = ".") -> RunConfig:
    """The RunConfig that `python -m rlvr_jax.train OVERRIDES...` would run, composed by Hydra
    from the same conf/ (same defaults, same checks), for notebooks and scripts:

        cfg = rlvr_jax.compose(["+experiment=math_grpo", "num_steps=10"], run_dir="runs/nb")
        summary = rlvr_jax.run(cfg)
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    OmegaConf.set_struct(cfg, False)
    cfg.run_dir = str(run_dir)
    return to_run_config(cfg)
