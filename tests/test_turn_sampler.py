"""The multi-turn sampler: turns that stop on a call marker, observations written into the
cache by one multi-token extend, the masks kept apart, log-probs equal to the trainer's
forward over the same multi-turn sequence, one compile per piece over 1..max_turns turns."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax.config import ModelConfig
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.turn_sampler import (RUNNING, STOP_BUDGET, STOP_CALL, STOP_EOS, ends_with_stop,
                                   make_turn_sampler, stop_table)
from tests.helpers import hlo_computations, scale_weights

EOS, PAD, CALL = 1, 0, [5, 6]  # a two-token call marker


@functools.lru_cache(maxsize=None)
def _tiny():
    cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=64, compute_dtype="float32")
    model = Decoder(cfg, 12)
    params = scale_weights(init_params(model, jax.random.key(0)), 4.0)
    # Make the marker likely: token 5 then 6 get a large bias through the head's rows.
    emb = params["embed_tokens"]["embedding"]
    params["embed_tokens"]["embedding"] = emb.at[5].mul(1.6).at[6].mul(1.6)
    return model, params


def test_stop_sequences_match_only_inside_the_turn():
    table, lengths = (jnp.asarray(x) for x in stop_table([[5, 6], [9]]))
    tokens = jnp.array([[3, 5, 6, 0], [5, 6, 0, 0], [9, 0, 0, 0], [4, 4, 0, 0]])
    col = jnp.array([3, 2, 1, 2])
    start = jnp.array([0, 1, 0, 0])  # row 1's turn began at column 1: "5" was not its own
    np.testing.assert_array_equal(ends_with_stop(tokens, col, start, table, lengths),
                                  [True, False, True, False])


def _episodes(sampler, params, prompt, pmask, key, max_turns, obs_len, rng):
    """A host loop like episodes.py's: observations of `obs_len` random ids after a call."""
    state = sampler.start(params, prompt, pmask, key)
    turns = np.ones(prompt.shape[0], np.int32)
    for turn in range(max_turns):
        state = sampler.decode(params, state)
        stop = np.asarray(state.stop_B)
        col = np.asarray(state.col_B)
        called = stop == STOP_CALL
        room = col + obs_len < sampler.observation_tokens + 1000  # R is large enough here
        end = called & ((turn == max_turns - 1) | ~room)
        obs = rng.integers(2, 12, size=(prompt.shape[0], sampler.observation_tokens))
        lens = np.where(called & ~end, obs_len, 0).astype(np.int32)
        turns += lens > 0
        if not called.any():
            break
        state = sampler.extend(params, state, jnp.asarray(obs, jnp.int32), jnp.asarray(lens),
                               jnp.asarray(end))
    return state, turns


def test_multi_turn_logp_equal_the_trainers_forward_and_masks_are_apart():
    model, params = _tiny()
    traces = []
    sampler = make_turn_sampler(model, max_new_tokens=40, observation_tokens=4, eos_id=EOS,
                                pad_id=PAD, stops=[CALL], temperature=1.0,
                                on_trace=traces.append)
    b, l = 16, 5
    prompt = jax.random.randint(jax.random.key(1), (b, l), 2, 12)
    pmask = jnp.ones((b, l), jnp.int32).at[:4, :2].set(0)
    rng = np.random.default_rng(0)
    seen_turns = set()
    for i in range(3):
        state, turns = _episodes(sampler, params, prompt, pmask, jax.random.key(i), 4, 3, rng)
        seen_turns |= set(turns.tolist())
    assert sorted(set(traces)) == ["turn_decode", "turn_extend", "turn_start"]
    assert len(traces) == 3, traces  # one compile each, over episodes of 1..4 turns
    assert len(seen_turns) >= 2, seen_turns
    tokens, logp, mask, loss_mask = map(np.asarray, sampler.rollout(state)[:4])
    obs = (mask == 1) & (loss_mask == 0)
    assert obs.any() and (loss_mask == 1).any()
    assert np.all(logp[obs] == 0) and np.all(loss_mask <= mask)
    # Each row's tokens are a contiguous prefix of its response slots.
    for m in mask:
        n = int(m.sum())
        np.testing.assert_array_equal(m, (np.arange(len(m)) < n).astype(np.float32))
    full = jnp.concatenate([prompt, jnp.asarray(tokens)], 1)
    full_mask = jnp.concatenate([pmask, jnp.asarray(mask, jnp.int32)], 1)
    logits = model.apply({"params": params}, full, full_mask, method="logits")
    ref = jax.nn.log_softmax(logits[:, l - 1:-1], -1)
    ref = np.take_along_axis(np.asarray(ref), tokens[..., None], -1)[..., 0]
    policy = loss_mask == 1
    np.testing.assert_allclose(logp[policy], ref[policy], rtol=1e-5, atol=1e-5)
    stops = np.asarray(state.stop_B)
    assert set(stops.tolist()) <= {STOP_EOS, STOP_CALL, STOP_BUDGET} and RUNNING not in stops


@pytest.mark.slow
def test_a_rows_tokens_do_not_depend_on_its_batch_mates():
    """Row 0 alone and row 0 beside 7 others that call tools: the same tokens."""
    model, params = _tiny()
    sampler = make_turn_sampler(model, max_new_tokens=24, observation_tokens=4, eos_id=EOS,
                                pad_id=PAD, stops=[CALL], temperature=1.0)
    prompt = jax.random.randint(jax.random.key(2), (8, 5), 2, 12)
    pmask = jnp.ones((8, 5), jnp.int32)
    key = jax.random.key(7)
    # The same key gives row 0 the same uniforms in both batches when B is the same; so
    # compare a batch with another whose rows 1.. differ (their prompts).
    other = prompt.at[1:].set(jax.random.randint(jax.random.key(3), (7, 5), 2, 12))
    a, _ = _episodes(sampler, params, prompt, pmask, key, 3, 2, np.random.default_rng(0))
    b, _ = _episodes(sampler, params, other, pmask, key, 3, 2, np.random.default_rng(0))
    ta, tb = np.asarray(a.tokens_B_R), np.asarray(b.tokens_B_R)
    np.testing.assert_array_equal(ta[0], tb[0])


@pytest.mark.slow
def test_eight_devices_give_the_episodes_of_one():
    """The batch sharded over 8 devices (params replicated) and on one device: the same
    tokens and masks, log-probs to float32 reduction order."""
    from rlvr_jax import sharding

    model, params = _tiny()
    sampler = make_turn_sampler(model, max_new_tokens=40, observation_tokens=4, eos_id=EOS,
                                pad_id=PAD, stops=[CALL], temperature=1.0)
    prompt = jax.random.randint(jax.random.key(1), (16, 5), 2, 12)  # as in the test above
    pmask = jnp.ones((16, 5), jnp.int32).at[:4, :2].set(0)
    key = jax.random.key(0)
    one, _ = _episodes(sampler, params, prompt, pmask, key, 3, 2, np.random.default_rng(0))
    mesh = sharding.make_mesh(data=8, fsdp=1)
    put = lambda x: jax.device_put(x, sharding.batch_sharding(mesh))
    eight, _ = _episodes(sampler, jax.device_put(params, sharding.replicated(mesh)),
                         put(prompt), put(pmask), key, 3, 2, np.random.default_rng(0))
    a, b = sampler.rollout(one), sampler.rollout(eight)
    for name in ("tokens_B_R", "mask_B_R", "loss_mask_B_R"):
        np.testing.assert_array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)))
    np.testing.assert_allclose(np.asarray(a.logp_B_R), np.asarray(b.logp_B_R), rtol=1e-5,
                               atol=1e-6)
    assert (np.asarray(a.mask_B_R) != np.asarray(a.loss_mask_B_R)).any()  # observations


def test_a_turn_decode_step_moves_no_whole_cache():
    """The multi-turn (and continuous) decode step writes each row's slot at that row's own
    column with one scatter into each layer's cache as it is laid out: in the compiled
    chunk loop (XLA:CPU, float32) the only instructions the size of a layer's whole cache are
    the loop's own buffers and the in-place scatters (keys, values), or, where the compiler
    expands a scatter into a loop over the rows, its in-place writes of one slot each. The
    vmapped per-row write before moved the whole cache to rows-first and back at every step
    (2x slower)."""
    cfg = ModelConfig(hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                      intermediate_size=128)
    model = Decoder(cfg, 97)
    params = init_params(model, jax.random.key(0))
    b, l, r, o = 8, 16, 24, 4
    s = make_turn_sampler(model, max_new_tokens=r, observation_tokens=o, eos_id=1, pad_id=0,
                          stops=[[5]], temperature=1.0, prompt_len=l)
    state = s.start(params, jnp.zeros((b, l), jnp.int32), jnp.ones((b, l), jnp.int32),
                    jax.random.key(0))
    hlo = s.decode.lower(params, state, jnp.int32(8)).compile().as_text()
    comps, whole = hlo_computations(hlo), state.cache.k_N_B_S_K_H[0].shape
    shape = re.compile(r"^(?:ROOT )?%?[\w.\-]+ = f32\[" + ",".join(map(str, whole))
                       + r"\]\S* ([\w\-]+)\(")
    kinds = []
    for body in set(re.findall(r"body=%?([\w.\-]+)", hlo)):
        for line in comps[body]:
            m = shape.match(line)
            if not m or m.group(1) in ("get-tuple-element", "parameter", "bitcast", "tuple"):
                continue
            called = comps[re.search(r"calls=%?([\w.\-]+)", line).group(1)]
            root = [x for x in called if x.startswith("ROOT")][0]
            kinds.append(re.match(r"^ROOT \S+ = \S+ ([\w\-]+)\(", root).group(1))
            assert kinds[-1] in ("scatter", "dynamic-update-slice"), root
            assert "parameter(" in " ".join(called), root  # in place
            if kinds[-1] == "dynamic-update-slice":  # an expanded scatter: a slot per write
                update = re.search(r"dynamic-update-slice\(%?[\w.\-]+, %?([\w.\-]+)",
                                   root).group(1)
                line = [x for x in called if re.match(rf"^\s*%?{re.escape(update)} = ", x)][0]
                assert f"f32[{','.join(map(str, whole))}]" not in line, line
    assert len(kinds) == 2 * 3  # keys and values of 3 layers, in place
