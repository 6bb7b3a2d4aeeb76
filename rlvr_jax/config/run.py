"""The run's typed schemas: warm start, reward source, preference jobs, verifier, mesh,
processes, logging, checkpoints, evaluation, and the RunConfig that holds every part
(schemas.py: the model, the tasks, sampling and the algorithm)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from rlvr_jax.config.choices import (CallFormat, DistillMode, Job, LoggerMode, OnBadRow,
                                     PairFormat, RewardScheme, RewardSource, SandboxMode,
                                     VerifierKind, _check)
from rlvr_jax.config.fleet import Backend, FleetConfig
from rlvr_jax.config.rollout import RolloutConfig
from rlvr_jax.config.schemas import AlgoConfig, ModelConfig, SamplingConfig


@dataclass
class WarmupConfig:
    """Supervised warm start on generated demonstrations, a fraction of them deliberately wrong."""

    steps: int = 1000
    sequences_per_step: int = 128
    learning_rate: float = 2e-3
    lr_warmup_steps: int = 50
    wrong_fraction: float = 0.3  # share of demonstrations whose answer is off by 1..max_offset
    wrong_max_offset: int = 10
    weight_decay: float = 0.01
    # Reuse warm starts across runs: params go to <shared_dir>/<hash of everything that shapes
    # them (seed, model, task, warmup, response budget)>, so a sweep over RL knobs trains each
    # seed's warm start once. "": keep it in the run directory.
    shared_dir: str = ""

    def check(self, key: str = "warmup") -> None:
        _check(self.steps >= 0, f"{key}.steps", "must be >= 0")
        _check(0.0 <= self.wrong_fraction < 1.0, f"{key}.wrong_fraction", "must be in [0, 1)")
        _check(self.wrong_max_offset >= 1, f"{key}.wrong_max_offset", "must be >= 1")


@dataclass
class PreferenceConfig:
    """Preference pairs for `job=reward_model` and `job=dpo` (tasks/preference_pairs.py): the
    task's procedural source (a correct and a wrong response to the same problem, each label
    flipped with probability `label_noise`, the gold kept), or JSONL / Parquet files
    (data/preferences.py: pairs, chat or Anthropic-HH rows). The same seed gives both jobs the
    same pairs."""

    pairs_per_step: int = 32
    label_noise: float = 0.2  # procedural only
    max_offset: int = 10  # procedural only: the wrong response is off by 1..max_offset
    heldout_pairs: int = 256  # procedural only: held-out pairs, for the pairwise accuracy
    train_path: str = ""  # "": the task's procedural pairs
    test_path: str = ""  # held-out pairs (required with train_path)
    format: PairFormat = PairFormat["auto"]
    on_bad_row: OnBadRow = OnBadRow["raise"]  # raise: error naming file:line | skip: counted

    def check(self, key: str = "preferences") -> None:
        _check(bool(self.train_path) == bool(self.test_path), f"{key}.test_path",
               f"set {key}.train_path and {key}.test_path together (the held-out pairs)")
        _check(self.pairs_per_step >= 1, f"{key}.pairs_per_step", "must be >= 1")
        _check(0.0 <= self.label_noise < 0.5, f"{key}.label_noise", "must be in [0, 0.5)")
        _check(self.max_offset >= 1, f"{key}.max_offset", "must be >= 1")
        _check(self.heldout_pairs >= 1, f"{key}.heldout_pairs", "must be >= 1")


@dataclass
class DistillConfig:
    """On-policy distillation (rlvr_jax/distill.py): a frozen teacher scores the student's
    sampled tokens; its per-token reverse KL becomes a dense reward (`reward`: added to each
    token's advantage, coef x (log pi_teacher - log pi_sampler)) or a loss term (`loss`:
    coef x (log pi - log pi_teacher)^2 / 2, whose gradient is the reverse KL's policy
    gradient per token)."""

    # A finished RL run directory (its last policy; a LoRA run's merged with its base) or a
    # local Hugging Face directory, with the student's tokenizer. Empty: no distillation.
    teacher: str = ""
    mode: DistillMode = DistillMode["reward"]
    coef: float = 1.0

    def check(self, key: str = "distill") -> None:
        _check(not self.teacher or self.coef > 0, f"{key}.coef", "must be > 0")


@dataclass
class RewardModelConfig:
    """`job=reward_model`: a reward model (models/reward.py) trained with the Bradley-Terry
    loss on the `preferences` pairs."""

    steps: int = 1500
    learning_rate: float = 1e-4  # 1e-3 did not learn (held-out accuracy 0.49 after 600 steps)
    lr_warmup_steps: int = 20
    margin: float = 0.0  # preference.bradley_terry_loss
    label_smoothing: float = 0.0

    def check(self, key: str = "reward_model") -> None:
        _check(self.steps >= 1, f"{key}.steps", "must be >= 1")
        _check(self.learning_rate > 0, f"{key}.learning_rate", "must be > 0")
        _check(0.0 <= self.label_smoothing < 0.5, f"{key}.label_smoothing",
               "must be in [0, 0.5)")


@dataclass
class DPOConfig:
    """`job=dpo`: the warm policy trained with the DPO loss (preference.dpo_loss) on the
    `preferences` pairs, against itself frozen as the reference."""

    steps: int = 300
    learning_rate: float = 1e-4
    lr_warmup_steps: int = 20
    beta: float = 0.1  # the implicit reward's scale: beta * log(pi / pi_ref)
    label_smoothing: float = 0.0  # conservative DPO (the labels' assumed flip rate)

    def check(self, key: str = "dpo") -> None:
        _check(self.steps >= 1, f"{key}.steps", "must be >= 1")
        _check(self.learning_rate > 0, f"{key}.learning_rate", "must be > 0")
        _check(self.beta > 0, f"{key}.beta", "must be > 0")
        _check(0.0 <= self.label_smoothing < 0.5, f"{key}.label_smoothing",
               "must be in [0, 0.5)")


# algo.loss.kl_coef=-1 (the default) resolves to this for a learned reward source: a reward
# model is exploitable, so the policy is held near the reference unless asked otherwise.
LEARNED_REWARD_KL_COEF = 0.05


@dataclass
class RewardConfig:
    """Where an RL step's reward comes from (rlvr_jax/learned_reward.py). The verifier always
    runs: with a learned source it is the gold measure (reward/accuracy, evaluations)."""

    # verifier: the task's verifier (the table of verifier.reward_scheme);
    # reward_model: the score of the reward model in `reward_model_dir`;
    # combined: verifier reward + reward_model_weight x score.
    source: RewardSource = RewardSource["verifier"]
    # A finished job=reward_model run directory. With source=verifier it is only watched:
    # its score of the training samples and evaluations is logged (reward/learned_mean).
    reward_model_dir: str = ""
    reward_model_weight: float = 1.0  # combined only
    # Reward components' weights by name (rlvr_jax/rewards.py: correct [1], format [0],
    # learned [reward_model_weight], length [1], turns [1], a task's own parts [0]): the
    # reward is their weighted sum; algo.adv_estimator=gdpo normalises each first.
    weights: Dict[str, float] = field(default_factory=dict)

    def check(self, key: str = "reward") -> None:
        _check(self.source == "verifier" or bool(self.reward_model_dir),
               f"{key}.reward_model_dir",
               f"{key}.source={self.source} needs a trained reward model: set it to a "
               "job=reward_model run directory (+experiment=math_rm trains one)")
        _check(self.source != "combined" or self.reward_model_weight > 0,
               f"{key}.reward_model_weight", "must be > 0 with source=combined")


@dataclass
class VerifierConfig:
    # inprocess: the arithmetic task's exact-integer check in the trainer process (trusted).
    # math: math-verify equivalence in worker processes with hard deadlines (rlvr_jax/verify).
    # code: candidate programs run in the bubblewrap sandbox (rlvr_jax/sandbox/bwrap.py).
    kind: VerifierKind = VerifierKind["inprocess"]
    reward_scheme: RewardScheme = RewardScheme["binary"]  # rlvr_jax.rewards.REWARD_TABLES
    mode: SandboxMode = SandboxMode["forkserver"]  # sandboxed kinds only (same containment)
    # > 1: sample the batch in this many chunks and verify chunk k (worker processes) while
    # chunk k+1 is sampled; all chunks use the same params, so it stays on-policy.
    overlap_chunks: int = 1
    workers: int = 2  # per pool: this process's, or each Ray actor's (backend: ray)
    # local: pools on this trainer host; ray: pools as actors on a Ray cluster (`fleet`)
    backend: Backend = Backend["local"]
    timeout_s: float = 10.0  # per job; the worker is killed and replaced past it
    # The circuit breaker: a step whose samples are sandbox errors (infrastructure, masked)
    # beyond this share stops the run with one line instead of training on the rest; 1: off.
    max_infra_share: float = 0.5
    batch_timeout_s: float = 300.0  # per call; each job's share of it bounds its time too

    def check(self, key: str = "verifier") -> None:
        _check(self.workers >= 1, f"{key}.workers", "must be >= 1")
        _check(self.timeout_s > 0, f"{key}.timeout_s", "must be > 0")
        _check(self.batch_timeout_s > 0, f"{key}.batch_timeout_s", "must be > 0")
        _check(self.overlap_chunks >= 1, f"{key}.overlap_chunks", "must be >= 1")
        _check(0 <= self.max_infra_share <= 1, f"{key}.max_infra_share",
               "must be in [0, 1] (1: never stop)")


@dataclass
class SessionConfig:
    """A stateful environment's sandbox sessions, one per episode (rlvr_jax/sandbox/
    session.py): its budgets and the live-session cap of each trainer process."""

    call_s: float = 5.0  # one call's wall clock (then interrupted; killed if it won't stop)
    episode_s: float = 300.0  # an episode's wall clock from its start
    max_calls: int = 0  # tool calls per episode (more are answered "spent"); 0: max_turns
    memory_mb: int = 512  # the world process's address space
    cpu_s: int = 60  # the world's CPU seconds
    processes: int = 32  # the world's processes
    workspace_mb: int = 64  # the session's writable /tmp
    output_bytes: int = 16384  # a call's output kept (the rest cut, said so)
    max_live: int = 256  # live sessions per trainer process (each ~20-30 MB; bench/sessions)
    # Sandboxes started ahead, at least (they grow to the largest batch of episodes opened,
    # or queued by a stream, so each batch opens from ready ones: ~1 ms a session)
    spares: int = 2
    check_timeout_s: float = 30.0  # the final-state check's wall clock

    def check(self, key: str = "env.session") -> None:
        for name in ("call_s", "episode_s", "check_timeout_s"):
            _check(getattr(self, name) > 0, f"{key}.{name}", "must be > 0")
        for name in ("memory_mb", "cpu_s", "processes", "workspace_mb", "output_bytes",
                     "max_live"):
            _check(getattr(self, name) >= 1, f"{key}.{name}", "must be >= 1")
        _check(self.spares >= 0, f"{key}.spares", "must be >= 0")
        _check(self.max_calls >= 0, f"{key}.max_calls", "must be >= 0 (0: no cap)")

    def limits(self):
        from rlvr_jax.sandbox.session import SessionLimits

        return SessionLimits(call_s=self.call_s, episode_s=self.episode_s,
                             memory_mb=self.memory_mb, cpu_s=self.cpu_s,
                             processes=self.processes, workspace_mb=self.workspace_mb,
                             output_bytes=self.output_bytes)


@dataclass
class EnvConfig:
    """Multi-turn episodes (rlvr_jax/episodes.py): after a turn that ends on a tool call, the
    environment answers and its observation is appended for the policy to read. `kind`:
    `none` (one turn, as the task's verifier alone needs), `tools` (the stateless built-in
    tools of verify/toolbox.py, each call run alone in the sandbox), the name of a stateful
    environment (python_repl, workspace, api, or one registered by an `rlvr_jax.envs` entry
    point: a session per episode, envs/session_env.py), or `package.module:factory` (a
    host-side environment, e.g. an experiment's control, called with this config)."""

    kind: str = "none"
    # kind=routed: the environments rows may name (a row's context "environment"; the first
    # by default), e.g. [python_repl, api]; they share call_format and the settings below
    routes: List[str] = field(default_factory=list)
    # `package.module:wrap`, called as wrap(environment, this config) -> environment: a
    # host-side wrapper around the environment built (an experiment's control, which never
    # becomes an option of a production environment); "" (the default): none
    wrap: str = ""
    tools: List[str] = field(default_factory=lambda: ["calculator"])  # kind=tools only
    call_format: CallFormat = CallFormat["tag"]  # envs/calls.py: tag | hermes
    max_turns: int = 4  # policy turns per episode; a call in the last one is not run
    observation_tokens: int = 32  # per observation, glue included; longer ones are cut
    # Share of the warm start's demonstrations that call a tool (the task's
    # `tool_demonstration`); the others answer directly.
    demo_tool_fraction: float = 0.5
    # Per-turn rewards by the call's outcome (ok | tool_error | malformed | unknown_tool),
    # placed at the token that ended the turn and added to the outcome reward (GRPO sees the
    # episode's sum, PPO's GAE each at its token), e.g. {malformed: -0.1, unknown_tool: -0.1}.
    # Empty (the default): outcome reward only.
    turn_rewards: Dict[str, float] = field(default_factory=dict)
    workers: int = 2  # sandboxed tool workers (kind=tools; a stateful kind's final checks)
    timeout_s: float = 5.0  # per call (kind=tools)
    batch_timeout_s: float = 120.0  # per turn's batch of calls (shared fairly, pool.share)
    mode: SandboxMode = SandboxMode["forkserver"]
    session: SessionConfig = field(default_factory=SessionConfig)  # stateful kinds
    # local: a stateful kind's sessions on this trainer host; ray: on a Ray cluster's
    # session actors (`fleet`), all calls of an episode on the actor holding its session
    backend: Backend = Backend["local"]

    def check(self, key: str = "env") -> None:
        from rlvr_jax.envs import registry
        from rlvr_jax.verify.toolbox import SCHEMAS

        if self.kind == "routed":
            _check(bool(self.routes), f"{key}.routes", "env.kind=routed needs env.routes, "
                   "e.g. [python_repl, api]")
            for i, name in enumerate(self.routes):
                _check(name not in ("none", "routed"), f"{key}.routes",
                       f"{name!r} cannot be a route")
                registry.check_kind(name, f"{key}.routes[{i}]")
        else:
            registry.check_kind(self.kind, f"{key}.kind")
        _check(not self.wrap or (":" in self.wrap and self.kind != "none"), f"{key}.wrap",
               "must be package.module:function, with an environment (env.kind) to wrap")
        _check(self.max_turns >= 1, f"{key}.max_turns", "must be >= 1")
        _check(self.observation_tokens >= 4, f"{key}.observation_tokens", "must be >= 4")
        _check(0.0 <= self.demo_tool_fraction <= 1.0, f"{key}.demo_tool_fraction",
               "must be in [0, 1]")
        _check(self.workers >= 1, f"{key}.workers", "must be >= 1")
        _check(self.timeout_s > 0 and self.batch_timeout_s > 0, f"{key}.timeout_s",
               "must be > 0")
        outcomes = ("ok", "tool_error", "malformed", "unknown_tool")  # envs/base.py
        bad = [k for k in self.turn_rewards if k not in outcomes]
        _check(not bad, f"{key}.turn_rewards", f"unknown call outcomes {bad} (known: "
               f"{', '.join(outcomes)}; a sandbox error has no reward: the episode is masked)")
        self.session.check(f"{key}.session")
        if self.kind == "tools":
            unknown = [t for t in self.tools if t not in SCHEMAS]
            _check(bool(self.tools) and not unknown, f"{key}.tools",
                   f"unknown tools {unknown} (known: {', '.join(sorted(SCHEMAS))})")


@dataclass
class MeshConfig:
    """Device mesh; axis names live in rlvr_jax/sharding.py. -1 means 'all remaining devices'."""

    data: int = -1
    fsdp: int = 1
    model: int = 1  # tensor parallelism: heads, MLP columns and the vocabulary split

    def check(self, key: str = "mesh") -> None:
        for axis in ("data", "fsdp", "model"):
            _check(getattr(self, axis) == -1 or getattr(self, axis) >= 1, f"{key}.{axis}",
                   "must be -1 or >= 1")


@dataclass
class DistributedConfig:
    """Several processes (hosts) in one run (rlvr_jax/distributed.py). Under SLURM, Open MPI or
    a TPU slice nothing needs setting: JAX reads the coordinator and ranks from the launcher.
    Elsewhere set all three; num_processes 0 or 1: one process unless a launcher says
    otherwise; -1: always join, JAX detecting the cluster (a TPU VM slice: launch/tpu_pod.sh)."""

    coordinator_address: str = ""  # host:port of process 0
    num_processes: int = 0
    process_id: int = -1
    heartbeat_timeout_s: int = 60  # a dead process ends the others after this long
    init_timeout_s: int = 300  # waiting for every process to join
    # A process that makes no progress (no RL or warm-up step, no evaluation batch) for this
    # long exits, and so ends the others: a hung process keeps sending heartbeats. -1: 1800 s
    # in a multi-process run, off in one process; 0: off.
    step_timeout_s: int = -1

    def check(self, key: str = "distributed") -> None:
        _check(self.num_processes >= -1, f"{key}.num_processes",
               "must be >= 0, or -1 (detect the cluster)")
        _check(self.num_processes <= 1 or 0 <= self.process_id < self.num_processes,
               f"{key}.process_id", f"must be in [0, {key}.num_processes)")
        _check(self.num_processes <= 1 or bool(self.coordinator_address),
               f"{key}.coordinator_address", f"must be set (host:port) when {key}.num_processes > 1")
        _check(self.step_timeout_s >= -1, f"{key}.step_timeout_s", "must be >= -1")
        _check(self.heartbeat_timeout_s >= 1 and self.init_timeout_s >= 1,
               f"{key}.heartbeat_timeout_s", "timeouts must be >= 1 s")


@dataclass
class LoggerConfig:
    mode: LoggerMode = LoggerMode["offline"]  # W&B mode
    project: str = "rlvr_jax"
    entity: Optional[str] = None
    progress_bar: bool = True


@dataclass
class CheckpointConfig:
    every_steps: int = 20
    max_to_keep: int = 2

    def check(self, key: str = "checkpoint") -> None:
        _check(self.every_steps >= 1, f"{key}.every_steps", "must be >= 1")
        _check(self.max_to_keep >= 1, f"{key}.max_to_keep", "must be >= 1")


@dataclass
class EvalConfig:
    # Held-out problems; 0: no held-out evaluation at all (every_steps and extra_sets too).
    num_problems: int = 500
    sampled_per_problem: int = 2  # temperature-1 samples per problem for sampled accuracy
    sequences_per_batch: int = 512  # fixed eval batch shape (last batch padded)
    every_steps: int = 0  # 0: only after the warm start and at the end
    # Held-out sets beside the task's own, each reported under its name (e.g. [humaneval]:
    # tasks/registry.py eval sets), each with its own prompt slots and evaluation samplers
    # (the training step's shapes stay the task's), `extra_problems` of each (0: all).
    extra_sets: List[str] = field(default_factory=list)
    extra_problems: int = 0
    # > 0: one-turn evaluation by continuous batching (rlvr_jax/continuous.py) over this many
    # decode rows, refilled `insert_rows` at a time (0: decode_rows / 8) as rows finish; the
    # same tokens as static batches of sequences_per_batch, fewer idle row-steps. 0: static.
    decode_rows: int = 0
    insert_rows: int = 0

    def check(self, key: str = "eval") -> None:
        from rlvr_jax.tasks import registry

        known = registry.eval_sets()
        unknown = [s for s in self.extra_sets if s not in known]
        _check(not unknown, f"{key}.extra_sets",
               f"unknown evaluation sets {unknown} (known: {', '.join(sorted(known))})")
        _check(self.num_problems >= 0, f"{key}.num_problems",
               "must be >= 0 (0: no held-out evaluation)")
        _check(self.sampled_per_problem >= 1, f"{key}.sampled_per_problem", "must be >= 1")
        _check(self.sequences_per_batch >= 1, f"{key}.sequences_per_batch", "must be >= 1")
        _check(self.extra_problems >= 0, f"{key}.extra_problems", "must be >= 0 (0: all)")
        _check(self.every_steps >= 0, f"{key}.every_steps", "must be >= 0")
        _check(self.decode_rows >= 0 and 0 <= self.insert_rows <= self.decode_rows,
               f"{key}.insert_rows", "needs 0 <= eval.insert_rows <= eval.decode_rows")


@dataclass
class RunConfig:
    name: str = "default"
    seed: int = 0
    num_steps: int = 60  # RL steps
    run_dir: str = "."  # set by hydra to its run directory
    # Exit cleanly (after a checkpoint) once this invocation has done this many RL steps;
    # rerunning resumes. For schedulers with time slots. 0: no limit.
    stop_after_steps: int = 0
    # Resume even though result-changing keys differ from the run's recorded config; the
    # change is recorded (RUN_DIR/config_changes.jsonl). Off: such a resume is refused.
    allow_config_changes: bool = False
    model: ModelConfig = field(default_factory=ModelConfig)
    # One schema per task family (TASK_SCHEMAS), chosen by the task group file (conf/task/) or,
    # from a plain dict, by task.name (`to_run_config`).
    task: Any = MISSING
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)  # verifier.backend: ray
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    mesh: MeshConfig = field(default_factory=MeshConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    # rl: train the policy (loop.py); reward_model: train a reward model; dpo: train the policy
    # on preference pairs (preference_runs.py)
    job: Job = Job["rl"]
    reward: RewardConfig = field(default_factory=RewardConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    preferences: PreferenceConfig = field(default_factory=PreferenceConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    @property
    def total_steps(self) -> int:
        """The steps a run of this job trains for: RL steps, reward-model or DPO steps."""
        return {"rl": self.num_steps, "reward_model": self.reward_model.steps,
                "dpo": self.dpo.steps}[str(self.job)]
