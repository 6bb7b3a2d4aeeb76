"""Continuous batching (rlvr_jax/continuous.py): sequences through a few decode rows, refilled
as rows finish, give each sequence the static sampler's tokens for the same per-sequence
stream (log-probs to float tolerance: the two attend through different code), one compile per
piece, and more of the row-steps make a token than a static batch's."""

import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax.continuous import make_continuous_sampler
from rlvr_jax.sampling import make_sampler
from tests.test_sampling import _tiny


def test_sequences_get_the_static_samplers_tokens_through_refilled_rows():
    _, model, params = _tiny()
    n, l, r = 24, 5, 8
    prompt = np.asarray(jax.random.randint(jax.random.key(3), (n, l), 2, 20), np.int32)
    mask = np.ones((n, l), np.int32)
    mask[::3, :2] = 0  # some prompts shorter (left padding)
    key = jax.random.key(5)
    static = make_sampler(model, max_new_tokens=r, eos_id=1, pad_id=0, temperature=1.0)
    want = static(params, jnp.asarray(prompt), jnp.asarray(mask), key, jnp.arange(n))
    traces = []
    cb = make_continuous_sampler(model, max_new_tokens=r, prompt_len=l, rows=8, insert_rows=2,
                                 eos_id=1, pad_id=0, temperature=1.0, on_trace=traces.append)
    got, stats = cb.run(params, prompt, mask, key, np.arange(n))
    lengths = np.asarray(want.mask_B_R).sum(1)
    assert lengths.min() < r, "no sequence ended early: the rows were never refilled"
    np.testing.assert_array_equal(got.tokens_B_R, np.asarray(want.tokens_B_R))
    np.testing.assert_array_equal(got.mask_B_R, np.asarray(want.mask_B_R))
    np.testing.assert_allclose(got.logp_B_R, np.asarray(want.logp_B_R), atol=1e-5)
    assert sorted(set(traces)) == ["continuous_decode", "continuous_insert"]
    assert traces.count("continuous_decode") == 1 and traces.count("continuous_insert") == 1
    # A static batch of 8 runs each batch to its longest row; the rows here stay busier.
    static_useful = sum(lengths[i:i + 8].sum() / (8 * lengths[i:i + 8].max())
                        for i in range(0, n, 8)) / 3
    assert stats["useful_fraction"] >= static_useful, (stats, static_useful)
    # The host-side schedule (what the efficiency bench counts with) is the run's.
    from rlvr_jax.continuous import simulate_steps

    assert simulate_steps(lengths, 8, 2) == stats["decode_steps"]
    # The same sequences in another order and with another row count: the same tokens.
    order = np.random.default_rng(0).permutation(n)
    cb4 = make_continuous_sampler(model, max_new_tokens=r, prompt_len=l, rows=4, insert_rows=1,
                                  eos_id=1, pad_id=0, temperature=1.0)
    again, _ = cb4.run(params, prompt[order], mask[order], key, order)
    np.testing.assert_array_equal(again.tokens_B_R, got.tokens_B_R[order])


def test_an_evaluation_by_continuous_batching_equals_static_batches(tmp_path):
    """`eval.decode_rows`: the held-out evaluation (greedy and sampled, 12 problems x 2, 8
    fake devices) reports what static batches of 8 report, one compile per piece."""
    import dataclasses

    from rlvr_jax import build, warmstart
    from rlvr_jax.verify.verifiers import make_verifier
    from tests.helpers import TINY, run_config

    cfg = run_config(["+experiment=math_grpo", *TINY], tmp_path)
    setup = build.task_setup(cfg.task, cfg.model, cfg.sampling.max_new_tokens,
                             str(tmp_path / "tok"))
    policy = build.policy(setup, cfg.mesh, cfg.sampling, build.Traces())
    params = policy.init_params(jax.random.key(0))
    traces = build.Traces()
    static = build.generators(policy, setup, cfg.sampling)
    rows = build.generators(policy, setup, cfg.sampling, traces=traces, eval_rows=(8, 8))
    e = dataclasses.replace(cfg.eval, num_problems=12, sampled_per_problem=2,
                            sequences_per_batch=8)
    verifier = make_verifier("inprocess", workers=1, timeout_s=5.0, batch_timeout_s=None,
                             mode=None)
    key = jax.random.key(4)
    want = warmstart.held_out_accuracy(static, setup, verifier, e, policy.put, params, key)
    got = warmstart.held_out_accuracy(rows, setup, verifier, e, policy.put, params, key)
    assert got == want
    assert set(traces.values()) == {1} and len(traces) == 4, traces  # insert, decode x 2
