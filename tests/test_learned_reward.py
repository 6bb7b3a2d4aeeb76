"""RL against a trained reward model (learned_reward.py): a tiny reward-model run, then RLHF
runs that load it. Exact resume (bitwise on CPU), one compile per scorer, the KL on by default,
the combined reward, the scores of the loop's sharded batch path against one-by-one forwards,
and one clear error per bad reward-model directory."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from rlvr_jax import batching, build, generate, jobs, learned_reward, stages
from rlvr_jax.checkpoint import read_params
from rlvr_jax.config import ConfigError, EnvConfig
from rlvr_jax.envs.base import OK, Reply, Stateless
from rlvr_jax.models import reward
from rlvr_jax.types import Rollout, Status, Verdict
from rlvr_jax.verify.verifiers import make_verifier
from tests.helpers import TINY, run_config

pytestmark = pytest.mark.slow

RM = ["+experiment=math_rm", *TINY, "reward_model.steps=3", "preferences.pairs_per_step=8",
      "preferences.heldout_pairs=8"]


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("rm")
    jobs.run(run_config(RM + [f"warmup.shared_dir={base / 'warm'}"], base / "rm"))
    return base


def _rlhf(rm_dir, *extra):
    return ["+experiment=math_grpo", *TINY, "num_steps=4", "eval.every_steps=2",
            "reward.source=reward_model", f"reward.reward_model_dir={rm_dir / 'rm'}",
            f"warmup.shared_dir={rm_dir / 'warm'}", *extra]


def _rows(run_dir):
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    return [r for r in rows if "reward/mean" in r], [r for r in rows if
                                                     "eval/sampled_learned_reward" in r]


def test_an_rlhf_run_resumes_exactly_and_compiles_each_scorer_once(rm_dir, tmp_path, caplog):
    args = _rlhf(rm_dir)
    caplog.set_level("INFO", logger="rlvr_jax")
    once = jobs.run(run_config(args, tmp_path / "once"))
    # Issue 26: mid-run evaluations went to metrics.jsonl only, and the progress line's "kl"
    # was the KL to the sampler (negative at times) though a reference KL is in the loss.
    out = caplog.text
    assert "eval at step 2: greedy" in out and "  kl_ref " in out and "  kl " not in out
    assert once["compiles"]["reward_model_score"] == 1
    assert once["compiles"]["reward_model_score_eval"] == 1
    assert once["eval/sampled_learned_reward_end"] == _rows(tmp_path / "once")[1][-1][
        "eval/sampled_learned_reward"]  # the proxy in the summary, beside the gold
    assert json.load(open(tmp_path / "once" / "run_config.json"))["algo"]["loss"][
        "kl_coef"] == 0.05  # on by default for a learned reward
    steps, evals = _rows(tmp_path / "once")
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert [r["step"] for r in evals] == [0, 2, 4]
    for r in steps:  # the reward is the reward model's score; the verifier still measures
        assert r["reward/mean"] == pytest.approx(r["reward/learned_mean"], abs=1e-6)
        assert 0.0 <= r["reward/accuracy"] <= 1.0
    twice = tmp_path / "twice"
    assert jobs.run(run_config(args + ["stop_after_steps=2"], twice))["stopped_at_step"] == 2
    again = jobs.run(run_config(args, twice))
    assert again["eval/sampled_accuracy_end"] == once["eval/sampled_accuracy_end"]
    a, _ = read_params(tmp_path / "once")
    b, _ = read_params(twice)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    assert [r["reward/learned_mean"] for r in _rows(twice)[0]] == [
        r["reward/learned_mean"] for r in steps]


def test_scores_of_the_sharded_batch_equal_one_by_one_forwards(rm_dir):
    cfg = run_config(_rlhf(rm_dir), rm_dir / "rl")
    traces = build.Traces()
    setup = build.task_setup(cfg.task, cfg.model, cfg.sampling.max_new_tokens,
                             str(rm_dir / "rm" / "tokenizer"))
    policy = build.policy(setup, cfg.mesh, cfg.sampling, traces)  # 8 fake devices
    learned = learned_reward.load(str(rm_dir / "rm"), setup, policy, traces)
    # A 3-step reward model scores ~1e-4 (its head starts at 0): shift the head for O(1) scores.
    learned = dataclasses.replace(learned, params=dict(learned.params, head=jax.tree.map(
        lambda x: x + 0.05, learned.params["head"])))
    rng = np.random.default_rng(0)
    b, L, R = 8, setup.prompt_len, setup.max_new_tokens
    prompt = rng.integers(3, 20, (b, L)).astype(np.int32)
    pmask = (np.arange(L)[None] >= rng.integers(0, L - 1, (b, 1))).astype(np.int32)
    tokens = rng.integers(3, 20, (b, R)).astype(np.int32)
    mask = (np.arange(R)[None] < rng.integers(1, R, (b, 1))).astype(np.float32)
    batch = learned_reward.scores(learned.score_train, learned.params, policy.put, prompt,
                                  pmask, tokens, mask)
    model = build.Decoder(setup.model_cfg, setup.vocab_size)
    params = jax.device_get(learned.params)
    one = [float(reward.scores(model, params,
                               np.concatenate([prompt[i:i + 1], tokens[i:i + 1]], 1),
                               np.concatenate([pmask[i:i + 1], mask[i:i + 1].astype(np.int32)],
                                              1))[0]) for i in range(b)]
    np.testing.assert_allclose(batch, one, rtol=1e-4, atol=1e-6)
    assert np.abs(batch).max() > 0.01 and len(set(np.round(batch, 4))) > 1, batch
    # The loop's path: each sampler chunk scored on its device arrays, while it is verified.
    problems = setup.task.train_batch(0, 0, 4)
    prompt, pmask = batching.encode_prompts(setup.tokenizer, [setup.task.prompt(p) for p in
                                                              problems], L)
    prompt, pmask = np.repeat(prompt, 4, axis=0), np.repeat(pmask, 4, axis=0)
    verifier = make_verifier("inprocess", workers=1, timeout_s=10.0, batch_timeout_s=None,
                             mode=None)
    sampled = stages.sample_and_verify(
        generate.single_turn(policy.sample_train, setup.tokenizer, policy.put), policy.put,
        verifier, setup.task, learned_reward.train_scorer(learned),
        policy.init_params(jax.random.key(0)), problems, prompt, pmask, jax.random.key(1),
        chunks=2, samples_per_prompt=4)
    whole = learned_reward.scores(learned.score_train, learned.params, policy.put, prompt, pmask,
                                  sampled.rollout.tokens_B_R,
                                  sampled.rollout.mask_B_R)  # one batch of 16
    np.testing.assert_allclose(sampled.learned_B, whole, rtol=1e-5,
                               atol=1e-6)  # chunks of 8: rounding
    # Multi-turn episodes: the reward model reads the whole episode (prompt, the policy's
    # turns and the observations between them), from the episodes' host record.
    env = DigitCalls()
    gens = build.generators(policy, dataclasses.replace(setup, max_new_tokens=16), cfg.sampling,
                            env, EnvConfig(kind="tools", observation_tokens=6, max_turns=3))
    sampled = stages.sample_and_verify(
        gens.train, policy.put, verifier, setup.task, learned_reward.train_scorer(learned),
        policy.init_params(jax.random.key(0)), problems, prompt, pmask, jax.random.key(1),
        chunks=2, samples_per_prompt=4)
    ro = sampled.rollout
    assert env.calls and ((ro.mask_B_R == 1) & (ro.loss_mask_B_R == 0)).any()
    whole = learned_reward.scores(learned.score_train, learned.params, policy.put, prompt, pmask,
                                  ro.tokens_B_R, ro.mask_B_R)
    np.testing.assert_allclose(sampled.learned_B, whole, rtol=1e-5, atol=1e-6)


class DigitCalls(Stateless):
    """A host environment whose calls are any digit (a random policy makes many): replies
    "7"."""

    tools, observation_prefix, observation_suffix = ("calculator",), "=", ";"
    stop_texts = tuple("0123456789")

    def __init__(self):
        self.calls = 0

    def respond(self, turns, contexts=None):
        self.calls += len(turns)
        return [Reply("7", OK, "calculator") for _ in turns]

    def render_call(self, tool, arguments):
        return "1"

    def close(self):
        pass


def test_combined_rewards_add_the_weighted_score_to_the_verifiers():
    verdicts = [Verdict(Status.PASS), Verdict(Status.WRONG),
                Verdict(Status.SANDBOX_ERROR, "oom"), Verdict(Status.PASS)]
    rollout = Rollout(np.full((4, 3), 5, np.int32), np.zeros((4, 3), np.float32),
                      np.ones((4, 3), np.float32), np.ones((4, 3), np.float32))
    prompt = np.ones((4, 2), np.int32)
    learned_B = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    common = dict(eos_id=2, reward_scheme="binary", samples_per_prompt=2, max_new_tokens=3,
                  overlong_buffer_tokens=0, overlong_penalty_factor=0.0, mask_truncated=False)
    from tests.test_stages import components

    combined = stages.score(verdicts, rollout, prompt, prompt, learned_B, source="combined",
                            **components("combined", learned_weight=2.0), **common)
    # PASS=1, WRONG=0; the sandbox error takes its group's valid mean (1.0) and leaves the loss
    np.testing.assert_allclose(combined.rewards_P_G, [[1 + 1.0, 0 - 2.0], [1 + 4.0, 1 + 0.5]])
    np.testing.assert_array_equal(combined.loss_mask_P_G_R.sum(-1), [[3, 3], [0, 3]])
    learned = stages.score(verdicts, rollout, prompt, prompt, learned_B,
                           source="reward_model",
                           **components("reward_model", learned_weight=1.0), **common)
    np.testing.assert_allclose(learned.rewards_P_G, learned_B.reshape(2, 2))
    np.testing.assert_array_equal(learned.loss_mask_P_G_R.sum(-1), [[3, 3], [3, 3]])


def test_a_bad_reward_model_directory_is_one_clear_error(rm_dir, tmp_path):
    cfg = run_config(_rlhf(rm_dir), tmp_path / "x")
    setup = build.task_setup(cfg.task, cfg.model, cfg.sampling.max_new_tokens,
                             str(rm_dir / "rm" / "tokenizer"))
    policy = build.policy(setup, cfg.mesh, cfg.sampling, build.Traces())
    (tmp_path / "empty").mkdir()
    rl_run = tmp_path / "rl"
    rl_run.mkdir()
    (rl_run / "run_config.json").write_text(json.dumps({"job": "rl"}))
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "run_config.json").write_text(json.dumps({"job": "reward_model"}))
    for where, says in [(tmp_path / "empty", "not a run directory"),
                        (rl_run, "a job=rl run, not a reward model"),
                        (unfinished, "has not finished")]:
        with pytest.raises(ConfigError, match="reward.reward_model_dir") as e:
            learned_reward.load(str(where), setup, policy, build.Traces())
        assert says in str(e.value)
