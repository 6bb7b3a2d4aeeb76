"""Every shipped config composes and validates; bad keys and values fail naming the key."""

import glob
import os

import pytest
from hydra.errors import ConfigCompositionException

from rlvr_jax.config import ConfigError
from tests.helpers import CONF_DIR, compose_cfg, run_config

EXPERIMENTS = sorted(os.path.basename(p)[:-5] for p in glob.glob(f"{CONF_DIR}/experiment/*.yaml"))


def test_there_are_experiments():
    assert "math_grpo" in EXPERIMENTS


# Presets whose data and weights live outside the repository: the user passes the paths.
GSM8K_PATHS = ["model.path=/models/qwen", "task.train_path=/data/train.jsonl",
               "task.test_path=/data/test.jsonl"]
NEEDS_PATHS = {"gsm8k_grpo": GSM8K_PATHS, "gsm8k_grpo_7b": GSM8K_PATHS,
               "gsm8k_rm": GSM8K_PATHS + ["preferences.train_path=/p/train.jsonl",
                                          "preferences.test_path=/p/test.jsonl"],
               "gsm8k_rlhf": GSM8K_PATHS + ["reward.reward_model_dir=/runs/rm"],
               "mixed_sources": GSM8K_PATHS}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_validates(name):
    cfg = run_config([f"+experiment={name}", *NEEDS_PATHS.get(name, [])])
    assert cfg.name == name


def test_gsm8k_without_paths_says_which_key():
    with pytest.raises(ConfigError, match="task.train_path"):
        run_config(["+experiment=gsm8k_grpo", "model.path=/models/qwen"])
    with pytest.raises(ConfigError, match="model.path"):
        run_config(["+experiment=gsm8k_grpo", "task.train_path=/a", "task.test_path=/b"])


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_opens_with_header(name):
    """Each preset opens with the command, hardware, run time and expected result."""
    head = open(f"{CONF_DIR}/experiment/{name}.yaml").read().split("\n\n")[0].lower()
    for word in ("command", "hardware", "run time", "expected"):
        assert word in head, f"{name}.yaml header lacks '{word}'"


@pytest.mark.parametrize("group", ["model", "task", "algo", "sampling", "verifier", "mesh",
                                   "logger"])
def test_every_group_option_composes(group):
    # Options that only make sense together get their partners.
    partners = {"task=gsm8k": ["verifier=math", "model.path=/m", "task.train_path=/a",
                               "task.test_path=/b"],
                "task=arithmetic": ["verifier=inprocess"],
                "task=codegen": ["verifier=code"], "verifier=math": ["task=gsm8k",
                "model.path=/m", "task.train_path=/a", "task.test_path=/b"],
                "verifier=code": ["task=codegen"], "model=qwen2_5_0p5b": ["model.path=/m"],
                "task=reasoning_gym": ["verifier=reasoning_gym"],
                "verifier=reasoning_gym": ["task=reasoning_gym"],
                "task=mixed": ["verifier=routed", "model.path=/m", "task.train_path=/a",
                               "task.test_path=/b"],
                "verifier=routed": ["task=mixed", "model.path=/m", "task.train_path=/a",
                                    "task.test_path=/b"],
                "model=qwen2_5_7b": ["model.path=/m"],
                "task=harbor": ["env.kind=harbor", "model.path=/m", "task.path=/tasks"],
                "task=inventory": ["env.kind=api"], "task=bugfix": ["env.kind=workspace"]}
    for path in glob.glob(f"{CONF_DIR}/{group}/*.yaml"):
        option = f"{group}={os.path.basename(path)[:-5]}"
        run_config([option, *partners.get(option, [])])


def test_default_composes():
    cfg = run_config()
    assert cfg.model.hidden_size > 0 and cfg.algo.samples_per_prompt >= 2


@pytest.mark.parametrize("override", ["algo.lr=0.1", "+algo.lr=0.1", "+lr=0.1"])
def test_unknown_key_is_rejected_with_its_name(override):
    with pytest.raises((ConfigCompositionException, ConfigError)) as e:
        run_config([override])
    assert override.lstrip("+").split("=")[0] in str(e.value)


def test_wrong_type_is_rejected_with_its_name():
    with pytest.raises(ConfigCompositionException) as e:
        compose_cfg(["algo.prompts_per_step=many"])
    assert "algo.prompts_per_step" in str(e.value)


@pytest.mark.parametrize("override,key", [
    ("algo.samples_per_prompt=1", "algo.samples_per_prompt"),
    ("model.num_kv_heads=3", "model.num_kv_heads"),
    ("sampling.top_p=0", "sampling.top_p"),
    # Greedy rollouts have no sampling distribution for the update's importance ratio.
    ("sampling.temperature=0", "sampling.temperature"),
    ("task.operators=[/]", "task.operators"),
    ("warmup.wrong_fraction=1.5", "warmup.wrong_fraction"),
    ("algo.loss.dual_clip_c=0.5", "algo.loss.dual_clip_c"),
    ("algo.adv_estimator=gae", "algo.adv_estimator"),  # GAE needs the critic (algo=ppo)
    ("algo.ppo.kl_in_reward=true", "algo.ppo.kl_in_reward"),  # only with GAE
    ("algo.dapo.sampled_prompts_per_step=96", "algo.dapo.sampled_prompts_per_step"),
    ("algo.minibatches_per_epoch=3", "algo.minibatches_per_epoch"),  # 512 rows into 3
    ("algo.dapo.overlong_buffer_tokens=5", "algo.dapo.overlong_buffer_tokens"),  # >= budget
    ("algo.epochs_per_rollout=0", "algo.epochs_per_rollout"),
    ("eval.num_problems=-1", "eval.num_problems"),  # 0: no held-out evaluation
    ("eval.sampled_per_problem=0", "eval.sampled_per_problem"),
    ("verifier.kind=code", "verifier.kind"),  # arithmetic is checked in process
    ("+env.turn_rewards.sandbox_error=-1", "env.turn_rewards"),  # masked, never rewarded
])
def test_bad_value_names_the_key(override, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        run_config([override])


@pytest.mark.parametrize("overrides,key", [
    (["algo=ppo", "algo.ppo.kl_target=0.1"], "algo.ppo.kl_target"),  # needs kl_in_reward
    (["task=codegen", "verifier=math"], "verifier.kind"),  # codegen runs in the sandbox
    (["reward.source=reward_model"], "reward.reward_model_dir"),  # which reward model?
    (["reward.source=combined", "reward.reward_model_dir=x", "reward.reward_model_weight=0"],
     "reward.reward_model_weight"),
    (["job=dpo", "model.lora_rank=4"], "model.lora_rank"),  # adapters train RL policies only
    (["job=reward_model", "model.lora_rank=4"], "model.lora_rank"),
    (["job=dpo", "dpo.beta=0"], "dpo.beta"),
    (["preferences.label_noise=0.5"], "preferences.label_noise"),  # labels carry no signal
    (["algo.loss.kl_coef=-0.5"], "algo.loss.kl_coef"),
    # each group's prompt once: needs groups, and microbatches of whole groups
    (["algo=ppo", "algo.samples_per_prompt=1", "algo.share_prompts=true"], "algo.share_prompts"),
    (["algo.share_prompts=true", "algo.microbatches=128"], "algo.share_prompts"),
    # issue 39: MaxRL weighs by 1 / pass rate (rewards >= 0); GiGPO needs turns and a group
    # estimator; a distillation teacher needs an RL job and a positive coefficient
    (["algo.adv_estimator=maxrl", "verifier.reward_scheme=signed"], "algo.adv_estimator"),
    (["algo.gigpo.weight=1"], "algo.gigpo.weight"),
    (["+experiment=calc_agent", "algo=ppo", "algo.gigpo.weight=1"], "algo.gigpo.weight"),
    (["job=dpo", "distill.teacher=/x"], "distill.teacher"),
    (["distill.teacher=/x", "distill.coef=0"], "distill.coef"),
    (["algo.loss.kind=dppo_tv", "+algo.loss.options.delta_low=0"],
     "algo.loss.options.delta_low"),
    (["+reward.weights.style=1"], "reward.weights.style"),
    # issue 40: the packed update cuts its own microbatches
    (["algo.pack.row_tokens=64", "algo.microbatches=2"], "algo.microbatches"),
    (["algo.pack.microbatch_rows=0"], "algo.pack.microbatch_rows"),
    # issue 40: streaming needs multi-turn episodes; sizes in range
    (["rollout.stream.rows=8"], "rollout.stream.rows"),
    (["+experiment=calc_agent", "rollout.stream.rows=8", "rollout.stream.insert_rows=9"],
     "rollout.stream.insert_rows"),
    (["+experiment=calc_agent", "rollout.stream.rows=8", "rollout.stream.chunk_steps=0"],
     "rollout.stream.chunk_steps"),
    (["+experiment=calc_agent", "rollout.stream.rows=8", "rollout.stream.late_calls=soon"],
     "rollout.stream.late_calls"),
    (["+experiment=calc_agent", "rollout.stream.rows=8", "rollout.stream.env_threads=-1"],
     "rollout.stream.env_threads"),
    (["+experiment=calc_agent", "rollout.stream.rows=8", "rollout.stream.chunk_steps=4",
      "rollout.stream.lookahead_steps=5"], "rollout.stream.lookahead_steps"),
])
def test_bad_ppo_values_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        run_config(overrides)


@pytest.mark.parametrize("override", [
    "verifier.reward_scheme=nope", "algo.adv_estimator=ppo", "algo.loss.agg=sum",
    "algo.loss.kl_estimator=k4", "algo.ppo.critic=shared",
    "algo.optim.lr_schedule=linear", "logger.mode=loud", "model.compute_dtype=int8",
])
def test_a_name_outside_its_choices_fails_at_composition_naming_the_key(override):
    """Enum-like keys are `Choice`s: Hydra rejects the name while composing, with the key and
    the allowed names in the message."""
    with pytest.raises(ConfigCompositionException) as e:
        compose_cfg([override])
    message = str(e.value) + str(e.value.__cause__)
    assert override.split("=")[0] in message and "expected one of" in message


def test_choices_match_what_the_code_implements():
    from rlvr_jax import advantages, losses, rewards
    from rlvr_jax.config import AdvEstimator, LossAgg, RewardScheme

    assert {c.value for c in AdvEstimator} == set(advantages.ESTIMATORS) | {"gae"}
    assert {c.value for c in LossAgg} == set(losses.AGGREGATIONS)
    assert {c.value for c in RewardScheme} == set(rewards.REWARD_TABLES)


def test_objectives_are_the_tables_and_their_options_are_checked():
    """algo.loss.kind names an objective of the table (rlvr_jax/objectives, entry points
    included); its own options (algo.loss.options) are its schema's fields, checked."""
    from rlvr_jax import objectives

    assert {"clip", "gspo"} <= set(objectives.specs())
    for name in objectives.specs():
        assert run_config([f"algo.loss.kind={name}"]).algo.loss.kind == name
    with pytest.raises(ConfigError, match=r"'algo.loss.kind': unknown objective 'dpo' \(known:"):
        run_config(["algo.loss.kind=dpo"])
    with pytest.raises(ConfigError, match=r"'algo.loss.options.tau': objective clip has no such"):
        run_config(["+algo.loss.options.tau=1.0"])
    with pytest.raises(ConfigError, match="'algo.loss.correction'"):
        run_config(["algo.loss.kind=gspo", "algo.loss.correction=token"])


def test_python_dicts_compose_like_the_command_line():
    """A plain dict goes through the same schemas: its task schema by task.name, unknown keys
    named, choices checked."""
    from rlvr_jax.config import to_run_config
    from rlvr_jax.tasks.dataset import DatasetTaskConfig

    cfg = to_run_config({"task": {"name": "dataset", "train_path": "/a", "test_path": "/b"},
                         "verifier": {"kind": "math"}, "warmup": {"steps": 0}})
    assert isinstance(cfg.task, DatasetTaskConfig) and cfg.task.format == "auto"
    with pytest.raises(ConfigError, match="task.operators"):
        to_run_config({"task": {"name": "dataset", "operators": ["+"]}})
    with pytest.raises(ConfigError, match="task.name"):
        to_run_config({"task": {"name": "chess"}})


def test_warmstart_key_ignores_rl_knobs_but_not_the_seed():
    from rlvr_jax.config import warmstart_key

    base = warmstart_key(run_config([]))
    assert warmstart_key(run_config(["algo.optim.learning_rate=0.1", "algo=ppo"])) == base
    assert warmstart_key(run_config(["seed=1"])) != base
    assert warmstart_key(run_config(["warmup.steps=5"])) != base


def test_run_dirname_is_short_flat_and_deterministic():
    from rlvr_jax.config import run_dirname

    long = ",".join(f"model.key_{i}=/some/path/{i}" for i in range(40))
    name = run_dirname(long)
    assert len(name) <= 120 and "/" not in name and name == run_dirname(long)
    assert run_dirname(long) != run_dirname(long + ",x=1")
    assert run_dirname("algo.optim.learning_rate=1e-4") == "algo.optim.learning_rate=1e-4"
    assert run_dirname("") == "default"  # the plain command's run: a sibling of the others


def test_help_lists_every_preset_group_option_task_and_section():
    """`--help` names the presets and each group's options (not the schemas behind them), and
    (issue 38.8) env, rollout, job=, eval.extra_sets and tasks registered by entry points."""
    import subprocess
    import sys

    from rlvr_jax.config import cli
    from rlvr_jax.tasks import registry

    help_text = cli.help_text()
    for path in glob.glob(f"{CONF_DIR}/*/*.yaml"):
        assert os.path.basename(path)[:-5] in help_text, path
    assert "_schema" not in help_text
    for word in ("env ", "rollout ", "job ", "extra_sets", "python_repl", "humaneval",
                 *registry.specs()):
        assert word in help_text, word
    # Both sides in fresh interpreters: tasks other tests registered in this one are not theirs.
    proc = subprocess.run([sys.executable, "-m", "rlvr_jax.train", "--help"],
                          capture_output=True, text=True, timeout=120)
    fresh = subprocess.run([sys.executable, "-c", "from rlvr_jax.config import cli; "
                            "print(cli.help_text())"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and fresh.returncode == 0, proc.stderr + fresh.stderr
    assert proc.stdout.strip() == fresh.stdout.strip()


@pytest.mark.parametrize("override,said", [
    ("algo.lr=1", "config key 'algo.lr' does not exist (did you mean algo.optim.learning_rate"),
    ("num_step=3", "(did you mean num_steps"),
    ("env.session.call=1", "(did you mean env.session.call_s"),
])
def test_an_unknown_key_names_the_nearest_known_ones(override, said):
    """Issue 38.8: Hydra's hint (`To append to your config use +algo.lr=1`) led to a second
    error."""
    import subprocess
    import sys

    from rlvr_jax.config import cli

    assert said in cli.unknown_override([override])
    for fine in ("algo.optim.learning_rate=1", "task.digits=3", "env.turn_rewards.ok=1",
                 "+experiment=x", "task=stash", "hydra.run.dir=x", "hydra/launcher=local"):
        assert cli.unknown_override([fine]) is None, fine
    proc = subprocess.run([sys.executable, "-m", "rlvr_jax.train", override],
                          capture_output=True, text=True, timeout=120)
    line = f"error: {cli.unknown_override([override])}"
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line]


def test_compose_from_python_equals_the_command_line(tmp_path):
    """`rlvr_jax.compose` gives what the CLI composes (e.g. the tiny model's init_std 0.1 from
    conf/model/tiny.yaml, not the schema's 0.02)."""
    import rlvr_jax

    cfg = rlvr_jax.compose(["+experiment=math_grpo", "num_steps=3"], run_dir=str(tmp_path))
    assert cfg == run_config(["+experiment=math_grpo", "num_steps=3"], tmp_path)
    assert cfg.model.init_std == 0.1 and cfg.run_dir == str(tmp_path)
    with pytest.raises(ConfigError, match="algo.samples_per_prompt"):
        rlvr_jax.compose(["algo.samples_per_prompt=1"])
    assert callable(rlvr_jax.run) and callable(rlvr_jax.evaluate_model)


@pytest.mark.parametrize("overrides,kl", [
    ([], 0.0), (["reward.source=reward_model", "reward.reward_model_dir=x"], 0.05),
    (["reward.source=combined", "reward.reward_model_dir=x"], 0.05),
    (["reward.reward_model_dir=x"], 0.0),  # only watched: the verifier's reward
    (["reward.source=reward_model", "reward.reward_model_dir=x", "algo.loss.kl_coef=0"], 0.0),
    (["+experiment=math_rlhf"], 0.5), (["+experiment=math_grpo"], 0.0),
])
def test_the_kl_to_the_reference_is_on_by_default_for_a_learned_reward(overrides, kl):
    assert run_config(overrides).algo.loss.kl_coef == kl


def test_backend_ray_without_the_extra_is_one_line(monkeypatch):
    """verifier.backend=ray where Ray is not installed names the extra (issue 41)."""
    import importlib.util

    import rlvr_jax

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ConfigError, match=r"'verifier.backend'.*pip install -e '\.\[ray\]'"):
        rlvr_jax.compose(["+experiment=code_grpo", "verifier.backend=ray"])
    with pytest.raises(ConfigError, match=r"'verifier.backend'.*inprocess"):
        monkeypatch.setattr(importlib.util, "find_spec", real)
        rlvr_jax.compose(["+experiment=math_grpo", "verifier.kind=inprocess",
                          "verifier.backend=ray"])


def test_the_fleet_session_cap_is_the_runs_and_covers_every_process():
    """fleet.max_sessions caps the run's live sessions, each of its processes admitting its
    share: a cap under what the processes hold open at once is refused by name."""
    import rlvr_jax
    from rlvr_jax.verify.verifiers import fleet_for

    ray_repl = ["+experiment=repl_agent", "env.backend=ray", "algo.prompts_per_step=4",
                "algo.samples_per_prompt=4", "eval.sequences_per_batch=16"]
    one = rlvr_jax.compose(ray_repl + ["fleet.max_sessions=16"])  # one batch of 16
    assert fleet_for(one.env.backend, one.fleet, "/r", processes=1).max_sessions == 16
    assert fleet_for(one.env.backend, one.fleet, "/r", processes=2).max_sessions == 8
    two = ["distributed.num_processes=2", "distributed.process_id=0",
           "distributed.coordinator_address=127.0.0.1:1"]
    with pytest.raises(ConfigError, match=r"'fleet.max_sessions': must be 0 or >= 16 \(2 "):
        rlvr_jax.compose(ray_repl + two + ["fleet.max_sessions=15"])
    rlvr_jax.compose(ray_repl + two + ["fleet.max_sessions=16"])
