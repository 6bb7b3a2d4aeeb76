"""optim.py directly: the learning-rate schedule by hand, separate actor and critic
optimizers in one transform, the train state's own copy of the params (donation), and the
update gate that holds the policy during critic warm-up."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax import optim


def _settings(**kw):
    return optim.OptimizerSettings(**({"learning_rate": 1.0, "warmup_steps": 0,
                                       "total_steps": 10, "schedule": "constant", "b1": 0.9,
                                       "b2": 0.99, "weight_decay": 0.0, "max_grad_norm": 1e9}
                                      | kw))


def test_the_schedule_by_hand():
    warm = optim.lr_schedule(2.0, 4, 14, "cosine")
    assert float(warm(0)) == pytest.approx(0.5)  # peak / warmup_steps: step 0 already learns
    assert float(warm(4)) == pytest.approx(2.0)
    assert float(warm(14)) == pytest.approx(0.2)  # cosine down to 0.1 x peak at the end
    flat = optim.lr_schedule(2.0, 0, 14, "constant")
    assert float(flat(0)) == float(flat(13)) == 2.0


def test_actor_and_critic_optimizers_are_separate():
    """A combined update equals an actor-only update and a critic-only update."""
    params = {"policy": jnp.ones(3), "value": jnp.full(3, 2.0)}
    grads = {"policy": jnp.array([1.0, -2.0, 0.5]), "value": jnp.array([3.0, 0.0, -1.0])}
    tx, _ = optim.make_rl_optimizer(_settings(learning_rate=0.1), _settings(learning_rate=0.5))
    both, _ = tx.update(grads, tx.init(params), params)
    for part, lr in (("policy", 0.1), ("value", 0.5)):
        alone, _ = optim.make_optimizer(_settings(learning_rate=lr))
        upd, _ = alone.update(grads[part], alone.init(params[part]), params[part])
        np.testing.assert_allclose(both[part], upd, rtol=1e-6)


def test_the_state_owns_a_copy_and_the_gate_holds_the_policy():
    params = {"policy": jnp.ones(2), "value": jnp.ones(2)}
    tx, lr = optim.make_rl_optimizer(_settings(), _settings())
    state = optim.init_train_state(params, tx)
    assert state.params["policy"] is not params["policy"]  # donating it keeps `params` alive
    grads = jax.tree.map(jnp.ones_like, params)
    held, metrics = optim.apply_grads(state, grads, tx, lr, gate={"policy": 0.0, "value": 1.0})
    np.testing.assert_array_equal(held.params["policy"], params["policy"])
    assert not np.array_equal(held.params["value"], params["value"])
    assert int(held.step) == 1 and float(metrics["grad_norm"]) == pytest.approx(2.0)
