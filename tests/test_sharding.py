"""Placement by rules (sharding.py), and equality across meshes: the jitted RL step (GRPO
options, PPO with either critic layout, several minibatch updates) and the sampler give the
same results on 1 device, 8-way data, 2x4 data x FSDP, 2x2x2 data x FSDP x model and 8-way
tensor-parallel meshes; the update that computes each group's prompt once equals the per-row
one on 1, 8 and 2x4 devices, and the packed update the padded one on 8 and 2x2x2."""

import jax
import numpy as np
import optax
import pytest

from rlvr_jax import optim, sharding, train_step
from rlvr_jax.config import ModelConfig
from rlvr_jax.models import value as value_model
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.types import TrainBatch
from tests.helpers import rl_step_options, scale_weights


def _batch(b=16, p=4, n=3, vocab=20, g=4):
    """Groups of g rows with one prompt each (the loop's P_G order)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(2, vocab, size=(b, p + n)).astype(np.int32)
    tokens[:, :p] = np.repeat(tokens[::g, :p], g, 0)
    input_mask = np.ones((b, p + n), np.int32)
    input_mask[:4, :2] = 0
    input_mask[8:12, :1] = 0
    resp_mask = np.ones((b, n), np.float32)
    resp_mask[::3, -1] = 0
    return TrainBatch(tokens, input_mask, resp_mask,
                      -rng.uniform(0.5, 3.0, size=(b, n)).astype(np.float32),
                      rng.normal(size=(b, n)).astype(np.float32) * resp_mask,
                      rng.normal(size=(b, n)).astype(np.float32) * resp_mask,
                      rng.normal(scale=0.1, size=(b, n)).astype(np.float32) * resp_mask)


def _one_step(mesh, kl_coef, **loss_options):
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)
    model = Decoder(cfg, 20)
    # Plain SGD, so the update is the gradient: Adam's first step is ~lr * sign(g), which turns
    # reduction-order noise in a near-zero gradient into a full +-lr difference.
    lr = optax.constant_schedule(0.1)
    tx = optax.sgd(lr)
    params = init_params(model, jax.random.key(0))
    rl_params = {"policy": params}
    if loss_options.get("critic"):
        rl_params["value"] = value_model.init_critic(cfg, loss_options["critic"], params,
                                                     jax.random.key(1))
        # A non-zero head, so the value loss reaches the trunk.
        rl_params["value"]["head"] = jax.tree.map(lambda x: x + 0.05, rl_params["value"]["head"])
    state = optim.init_train_state(rl_params, tx)
    state_sh = sharding.state_shardings(state, mesh)
    state = jax.device_put(state, state_sh)
    ref = jax.device_put(params, sharding.state_shardings(params, mesh))
    step = train_step.make_rl_step(
        model, tx, lr, prompt_len=4, temperature=1.0, state_sharding=state_sh,
        metrics_sharding=sharding.replicated(mesh),
        **rl_step_options(eps_low=0.2, eps_high=0.28, kl_coef=kl_coef, norm_tokens=3,
                          **loss_options))
    batch = jax.device_put(_batch(), sharding.batch_sharding(mesh))
    new_state, metrics = step(state, ref, batch, jax.random.key(7), 1.0)
    return new_state, metrics


@pytest.mark.parametrize("kl_coef,options", [
    (0.0, {}),
    pytest.param(0.1, dict(kl_estimator="k2", loss_agg="seq-mean-token-sum-norm",
                           dual_clip_c=3.0), marks=pytest.mark.slow),
    pytest.param(0.0, dict(policy_loss="gspo", loss_agg="seq-mean-token-mean"),
                 marks=pytest.mark.slow),
    pytest.param(0.0, dict(critic="separate", entropy_coef=0.01), marks=pytest.mark.slow),
    (0.0, dict(critic="head", epochs=2, minibatches=2, microbatches=2)),
])
def test_step_is_the_same_on_1_and_8_devices(kl_coef, options):
    """Every option set on the data and FSDP layouts; the tensor-parallel layouts on the first
    and the last (PPO with a value head, several updates), which cover every parameter kind
    (one compile per mesh and option set: the suite's time is the limit)."""
    assert jax.device_count() == 8, "conftest sets 8 fake CPU devices"
    one, m1 = _one_step(sharding.make_mesh(devices=jax.devices()[:1]), kl_coef, **options)
    assert np.isfinite(float(m1["loss"])) and float(m1["grad_norm"]) > 0
    tensor_parallel = not options or options.get("critic") == "head"
    for mesh in MESHES()[:4 if tensor_parallel else 2]:
        many, m8 = _one_step(mesh, kl_coef, **options)
        np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b),
                                                             rtol=1e-4, atol=1e-6),
                     many.params, one.params)


@pytest.mark.slow  # the not-slow run keeps the 1-device equality (test_train_step.py)
def test_each_groups_prompt_once_is_the_same_update_on_every_layout():
    """group_size=4 (each group's prompt computed once; microbatches of whole groups) on 1
    device, 8-way data and 2x4 data x FSDP against the per-row forward on one device: PPO with
    a value head on the trunk, a KL term, 2 microbatches."""
    options = dict(critic="head", microbatches=2, entropy_coef=0.01)
    rows, m_rows = _one_step(sharding.make_mesh(devices=jax.devices()[:1]), 0.1, **options)
    meshes = [sharding.make_mesh(devices=jax.devices()[:1])] + list(MESHES()[:2])
    for mesh in meshes:
        once, m_once = _one_step(mesh, 0.1, group_size=4, **options)
        for k in ("loss", "pg_loss", "value_loss", "kl_ref", "grad_norm"):
            np.testing.assert_allclose(float(m_once[k]), float(m_rows[k]), rtol=1e-5, err_msg=k)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b),
                                                             rtol=1e-4, atol=1e-6),
                     once.params, rows.params)


@pytest.mark.slow  # the not-slow run keeps the 1-device equality (test_train_step.py)
def test_the_packed_update_is_the_same_on_every_layout():
    """Issue 40: the packed update (packing.py; microbatches of 8 packed rows) on 8-way data
    and 2x2x2 data x FSDP x model against the padded one on one device: PPO with a value head
    on the trunk, a KL term, each group's prompt once."""
    options = dict(critic="head", entropy_coef=0.01, group_size=4)
    rows, m_rows = _one_step(sharding.make_mesh(devices=jax.devices()[:1]), 0.1, **options)
    for mesh in (MESHES()[0], MESHES()[2]):
        packed, m_packed = _one_step(mesh, 0.1, pack_rows=8, pack_capacity=10, **options)
        for k in ("loss", "pg_loss", "value_loss", "kl_ref", "grad_norm"):
            np.testing.assert_allclose(float(m_packed[k]), float(m_rows[k]), rtol=1e-5,
                                       err_msg=k)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b),
                                                             rtol=1e-4, atol=1e-6),
                     packed.params, rows.params)


def MESHES():
    return (sharding.make_mesh(data=8, fsdp=1), sharding.make_mesh(data=2, fsdp=4),
            sharding.make_mesh(data=2, fsdp=2, model=2),
            sharding.make_mesh(data=1, fsdp=1, model=8))


def test_rules_place_params_by_their_logical_axes():
    """fsdp splits the embedding dimension, model the heads, MLP columns and vocabulary; a
    dimension the axis does not divide (a 20-word vocabulary over 8) stays whole; pure data
    parallelism replicates everything; optimizer moments follow their params."""
    PS = jax.sharding.PartitionSpec
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=4, intermediate_size=64,
                      tie_embeddings=False)
    params = init_params(Decoder(cfg, 24), jax.random.key(0))
    layer = lambda sh: sh["layers"]  # stacked: [N, ...], the layer axis never split
    fsdp = sharding.state_shardings(params, sharding.make_mesh(data=1, fsdp=8))
    assert layer(fsdp)["mlp"]["gate_up_proj"]["kernel"].spec == PS(None, sharding.FSDP, None)
    assert layer(fsdp)["mlp"]["down_proj"]["kernel"].spec == PS(None, None, sharding.FSDP)
    tp = sharding.state_shardings(params, sharding.make_mesh(data=2, fsdp=2, model=2))
    assert layer(tp)["self_attn"]["qkv_proj"]["kernel"].spec == PS(None, sharding.FSDP,
                                                                    sharding.MODEL)
    assert layer(tp)["self_attn"]["o_proj"]["kernel"].spec == PS(None, sharding.MODEL,
                                                                 sharding.FSDP)
    assert layer(tp)["mlp"]["gate_up_proj"]["kernel"].spec == PS(None, sharding.FSDP,
                                                                 sharding.MODEL)
    assert tp["embed_tokens"]["embedding"].spec == PS(sharding.MODEL, sharding.FSDP)
    assert tp["lm_head"]["kernel"].spec == PS(sharding.FSDP, sharding.MODEL)
    assert layer(tp)["input_layernorm"]["weight"].spec == PS(None, None)
    tp8 = sharding.state_shardings(params, sharding.make_mesh(data=1, fsdp=1, model=8))
    assert tp8["lm_head"]["kernel"].spec == PS(None, sharding.MODEL)  # 24 % 8 == 0
    odd = init_params(Decoder(cfg, 20), jax.random.key(0))
    assert sharding.state_shardings(odd, sharding.make_mesh(model=8, data=1))[
        "lm_head"]["kernel"].spec == PS(None, None)  # 20 % 8 != 0: whole
    data = sharding.state_shardings(params, sharding.make_mesh(data=8, fsdp=1))
    assert all(s.is_fully_replicated for s in jax.tree.leaves(data))
    tx = optax.adam(1e-3)
    opt = sharding.state_shardings(jax.eval_shape(tx.init, params), sharding.make_mesh(
        data=2, fsdp=2, model=2))
    assert layer(opt[0].mu)["self_attn"]["qkv_proj"]["kernel"].spec == PS(None, sharding.FSDP,
                                                                        sharding.MODEL)
    assert opt[0].count.spec == PS()


def test_sampler_is_the_same_on_every_mesh():
    """Greedy rollouts (tokens exactly) and log-probs agree between one device and every mesh,
    params placed by the rules and prompts split over the data-parallel axes."""
    from rlvr_jax.sampling import make_sampler

    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64)
    model = Decoder(cfg, 24)
    params = scale_weights(init_params(model, jax.random.key(0)), 5.0)
    prompt = jax.random.randint(jax.random.key(1), (16, 5), 2, 24)
    pmask = np.ones((16, 5), np.int32)
    pmask[:3, :2] = 0
    sample = make_sampler(model, max_new_tokens=6, eos_id=1, pad_id=0, temperature=0.0)
    one = sample(params, prompt, pmask, jax.random.key(0))
    for mesh in MESHES():
        p = jax.device_put(params, sharding.state_shardings(params, mesh))
        rows = sharding.batch_sharding(mesh)
        got = sample(p, jax.device_put(prompt, rows), jax.device_put(pmask, rows),
                     jax.random.key(0))
        np.testing.assert_array_equal(np.asarray(got.tokens_B_R), np.asarray(one.tokens_B_R))
        np.testing.assert_allclose(np.asarray(got.logp_B_R), np.asarray(one.logp_B_R),
                                   rtol=1e-4, atol=1e-5)


def test_mesh_errors_name_the_config_key():
    with pytest.raises(ValueError, match="mesh.data"):
        sharding.make_mesh(data=3, fsdp=1)
    with pytest.raises(ValueError, match="mesh.model"):
        sharding.make_mesh(data=-1, fsdp=1, model=3)
    with pytest.raises(ValueError, match="algo.prompts_per_step"):
        sharding.check_batch(12, sharding.make_mesh(), "algo.prompts_per_step")
