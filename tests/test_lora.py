"""LoRA: adapters equal their folded weights, start as the identity, are all that trains,
and a LoRA run exports plain weights that compute what the adapted policy computed."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlvr_jax import lora, optim, sharding, train_step
from rlvr_jax.config import ConfigError, ModelConfig
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.types import TrainBatch
from tests.helpers import run_config, scale_weights

VOCAB = 24
CFG = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  intermediate_size=48, qkv_bias=True, tie_embeddings=False, lora_rank=4,
                  lora_alpha=8.0, lora_targets=["qkv_proj", "o_proj", "gate_up_proj",
                                                "down_proj", "lm_head"])


def _random_adapters(adapters, key):
    """Adapters far from their zero start (B = 0 would make every check trivial)."""
    leaves, tree = jax.tree.flatten(adapters)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(tree, [0.3 * jax.random.normal(k, x.shape, x.dtype)
                                     for k, x in zip(keys, leaves)])


def _tokens():
    tokens = jax.random.randint(jax.random.key(3), (3, 7), 2, VOCAB)
    mask = np.ones((3, 7), np.int32)
    mask[2, :3] = 0
    return tokens, jnp.asarray(mask)


def test_split_and_merge_are_inverse_and_adapters_sit_beside_their_kernels():
    params = init_params(Decoder(CFG, VOCAB), jax.random.key(0))
    base, adapters = lora.split(params)
    assert jax.tree.structure(lora.merge(base, adapters)) == jax.tree.structure(params)
    attn = adapters["layers"]["self_attn"]
    assert attn["qkv_proj"]["lora_a"].shape == (2, 32, 4)  # stacked: [N, in, r]
    assert attn["qkv_proj"]["lora_b"].shape == (2, 4, 32 + 2 * 2 * 8)
    assert adapters["lm_head"]["lora_b"].shape == (4, VOCAB)
    assert "lora_a" not in str(jax.tree_util.tree_structure(base))
    assert lora.count(adapters) < lora.count(base) / 5


def test_fresh_adapters_leave_the_policy_as_it_was_and_the_base_runs_without_them():
    model = Decoder(CFG, VOCAB)
    params = scale_weights(init_params(model, jax.random.key(0)), 5.0)
    base, _ = lora.split(params)
    tokens, mask = _tokens()
    logits = lambda p: np.asarray(model.apply({"params": p}, tokens, mask, method="logits"))
    np.testing.assert_array_equal(logits(params), logits(base))  # B = 0: the identity


def test_a_rank_r_update_equals_the_folded_weights():
    """x (W + s A B) computed as x W + s (x A) B: the adapted model and its folded weights give
    the same logits (float32 rounding), and differ from the base."""
    model = Decoder(CFG, VOCAB)
    base, adapters = lora.split(scale_weights(init_params(model, jax.random.key(0)), 5.0))
    adapted = lora.merge(base, _random_adapters(adapters, jax.random.key(1)))
    folded = lora.fold(adapted, CFG.lora_scale)
    assert jax.tree.structure(folded) == jax.tree.structure(base)
    tokens, mask = _tokens()
    logits = lambda p: np.asarray(model.apply({"params": p}, tokens, mask, method="logits"))
    np.testing.assert_allclose(logits(adapted), logits(folded), rtol=2e-5, atol=2e-5)
    assert np.abs(logits(adapted) - logits(base)).max() > 0.1
    # Folding by hand, one layer's q/k/v kernel: W + s A B.
    qkv = adapted["layers"]["self_attn"]["qkv_proj"]
    want = np.asarray(qkv["kernel"][1]) + CFG.lora_scale * (
        np.asarray(qkv["lora_a"][1], np.float64) @ np.asarray(qkv["lora_b"][1], np.float64))
    np.testing.assert_allclose(np.asarray(folded["layers"]["self_attn"]["qkv_proj"]["kernel"][1]),
                               want, rtol=1e-5, atol=1e-6)


def test_the_rl_step_trains_the_adapters_only_and_the_reference_is_the_base():
    model = Decoder(CFG, VOCAB)
    base, adapters = lora.split(scale_weights(init_params(model, jax.random.key(0)), 3.0))
    tx = optax.adam(1e-2)
    state = optim.init_train_state({"policy": adapters}, tx)
    # Only the adapters are in the optimizer: Adam's two moments of exactly their shapes.
    moments = jax.tree.leaves(state.opt_state)
    assert sum(int(x.size) for x in moments) == 2 * lora.count(adapters) + 1  # + the count
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    step = train_step.make_rl_step(
        model, tx, optax.constant_schedule(1e-2), prompt_len=3, temperature=1.0,
        loss=train_step.LossOptions(kl_coef=0.1), state_sharding=sharding.state_shardings(
            state, mesh), metrics_sharding=sharding.replicated(mesh), adapters=True)
    tokens, mask = _tokens()
    r = tokens.shape[1] - 3
    old = train_step.response_logp(model, base, tokens, mask, 3, 1.0)[0]  # sampled by the base
    batch = TrainBatch(tokens, mask, old, jnp.ones((3, r)) * jnp.array([[1.], [-1.], [.5]]),
                       jnp.ones((3, r)))
    base_before = jax.tree.map(np.asarray, base)
    state, metrics = step(state, base, batch, jax.random.key(0), 1.0)
    # The policy started at the base: KL to it is 0, and the update moved the adapters only.
    assert abs(float(metrics["kl_ref"])) < 1e-6
    assert jax.tree.structure(state.params["policy"]) == jax.tree.structure(adapters)
    b = state.params["policy"]["layers"]["mlp"]["down_proj"]["lora_b"]
    assert float(jnp.abs(b).max()) > 0  # B moved from 0 (A's gradient is 0 at B = 0)
    jax.tree.map(np.testing.assert_array_equal, base_before, jax.tree.map(np.asarray, base))
    new = train_step.response_logp(model, lora.merge(base, state.params["policy"]), tokens,
                                   mask, 3, 1.0)[0]
    assert float(jnp.abs(new - old).max()) > 1e-4


def test_lora_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="model.lora_targets"):
        run_config(["model.lora_rank=4", "model.lora_targets=[qkv,o_proj]"])
    with pytest.raises(ConfigError, match="model.lora_rank"):
        run_config(["+experiment=math_ppo", "model.lora_rank=4"])
    with pytest.raises(ConfigError, match="model.lora_rank"):
        run_config(["model.lora_rank=-1"])


@pytest.mark.slow
def test_a_lora_run_trains_resumes_and_exports_merged_weights(tmp_path):
    """A LoRA run end to end: warm start (full weights), RL on adapters, checkpoints of the
    adapters alone; the export folds them and computes what the adapted policy computes."""
    from rlvr_jax import compose, run
    from rlvr_jax.checkpoint import read_policy_params
    from rlvr_jax.export import export, policy_of_run
    from rlvr_jax.models import hf

    run_dir = tmp_path / "run"
    cfg = compose(["+experiment=math_grpo", "model.lora_rank=4", "num_steps=2",
                   "model.hidden_size=32", "model.num_layers=2", "model.intermediate_size=64",
                   "warmup.steps=10", "algo.prompts_per_step=4", "algo.samples_per_prompt=2",
                   "eval.num_problems=4", "eval.sampled_per_problem=1",
                   "eval.sequences_per_batch=8", "logger.progress_bar=false"], run_dir=run_dir)
    summary = run(cfg)
    assert summary["compiles"]["train_step"] == 1
    # Issue 26: the start evaluation ran the warm params, every later one the base with
    # adapters: two compiles of each evaluation sampler.
    assert summary["compiles"]["sampler_eval_greedy"] == 1
    assert summary["compiles"]["sampler_eval_sampled"] == 1
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2]
    adapters, _ = read_policy_params(str(run_dir))
    assert lora.split(adapters)[0] == {}  # the checkpoint holds the adapters alone
    out = tmp_path / "hf"
    export(str(run_dir), str(out))
    model_cfg, exported = hf.load(str(out))
    assert model_cfg.lora_rank == 0 and "lora_a" not in str(jax.tree.structure(exported))
    adapted, _ = policy_of_run(str(run_dir), cfg.model)
    tokens, mask = _tokens()
    logits = lambda m, p: np.asarray(Decoder(m, m.vocab_size or p["embed_tokens"][
        "embedding"].shape[0]).apply({"params": p}, tokens, mask, method="logits"))
    np.testing.assert_allclose(logits(model_cfg, exported), logits(cfg.model, adapted),
                               rtol=1e-4, atol=1e-4)
    assert os.path.exists(out / "tokenizer.json") or os.path.exists(out / "tokenizer_config.json")
