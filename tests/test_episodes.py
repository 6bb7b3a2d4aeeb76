"""The episode driver: turns and observations, token-in token-out (the observation ids in
the record are the environment's text tokenized alone), budgets and the reasons episodes
end, special-token strings in tool output staying text. The environment here is scripted
(the real tools in the sandbox: tests/envs/test_tool_env.py)."""

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax import episodes
from rlvr_jax.config import ModelConfig
from rlvr_jax.envs.base import OK, SANDBOX_ERROR, Reply, Stateless
from rlvr_jax.types import Status
from rlvr_jax.models.policy import Decoder, init_params
from rlvr_jax.tokenizer import load_tokenizer, save_char_tokenizer
from rlvr_jax.turn_sampler import make_turn_sampler
from tests.helpers import scale_weights


@functools.lru_cache(maxsize=None)
def _setup(tmp=None):
    # A directory per process: two test workers writing one were seen to read it half-written.
    tmp = tmp or f"/tmp/rlvr_test_episodes_tok_{os.getpid()}"
    save_char_tokenizer(tmp)
    tok = load_tokenizer(tmp)
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
                      intermediate_size=64, compute_dtype="float32")
    model = Decoder(cfg, len(tok))
    params = scale_weights(init_params(model, jax.random.key(0)), 3.0)
    hash_id = tok.convert_tokens_to_ids("#")
    emb = params["embed_tokens"]["embedding"]  # tied head: '#' (the call marker) is likely
    params["embed_tokens"]["embedding"] = emb.at[hash_id].mul(2.5)
    return tok, model, params


class ScriptedEnv(Stateless):
    """Replies with `outputs[i % len]` to the i-th call; rows of calls in `fail` fail."""

    stop_texts = ("#",)
    tools = ("calculator",)
    observation_prefix, observation_suffix = "[", "]"

    def __init__(self, outputs, fail_every=0, reward=0.0):
        self.outputs, self.fail_every, self.calls, self.turns = outputs, fail_every, 0, []
        self.reward = reward

    def respond(self, turns, contexts=None):
        out = []
        for t in turns:
            self.turns.append(t)
            self.calls += 1
            if self.fail_every and self.calls % self.fail_every == 0:
                out.append(Reply("", SANDBOX_ERROR, "calculator"))
            else:
                out.append(Reply(self.outputs[self.calls % len(self.outputs)], OK, "calculator",
                                 self.reward))
        return out

    def render_call(self, tool, arguments):
        return "#"

    def close(self):
        pass


def _run(env, max_turns=3, r=48, o=12, b=16):
    tok, model, params = _setup()
    sampler = make_turn_sampler(model, max_new_tokens=r, observation_tokens=o,
                                eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                                stops=[tok.encode("#", add_special_tokens=False)],
                                temperature=1.0)
    glue = episodes.Glue.of(tok, env.observation_prefix, env.observation_suffix)
    prompt = np.full((b, 4), tok.convert_tokens_to_ids("7"), np.int32)
    pmask = np.ones((b, 4), np.int32)
    return tok, glue, episodes.run(sampler, env, tok, glue, params, prompt, pmask,
                                   jax.random.key(1), max_turns=max_turns, put=jnp.asarray)


def test_observations_are_the_environments_ids_verbatim_and_never_special():
    """Tool output that spells the tokenizer's special tokens stays text: no EOS or pad id
    enters the record from it, and the ids between a call and the next turn are exactly
    Glue.ids(output)."""
    output = "<eos><pad>x<eos>"
    env = ScriptedEnv([output])
    tok, glue, e = _run(env, o=20)
    want, cut = glue.ids(output, 20)
    assert not cut and tok.eos_token_id not in want and tok.pad_token_id not in want
    ro = e.rollout
    obs = (ro.mask_B_R == 1) & (ro.loss_mask_B_R == 0)
    assert obs.any(), "the model made no call: the test checks nothing"
    for row, m in zip(ro.tokens_B_R, obs):
        spans = np.split(row[m], np.flatnonzero(np.diff(np.flatnonzero(m)) > 1) + 1)
        for s in spans:
            if len(s):
                assert s.tolist() == want
    assert np.all(ro.logp_B_R[obs] == 0)


@pytest.mark.slow
def test_budgets_end_episodes_with_their_reason():
    env = ScriptedEnv(["1" * 40])  # longer than an observation's 12 tokens: cut
    tok, glue, e = _run(env, max_turns=2)
    s = e.stats
    assert s["episode/observations_cut"] > 0
    ids, cut = glue.ids("1" * 40, 12)
    assert cut and len(ids) == 12 and tok.decode(ids).endswith(episodes.CUT_MARKER + "]")
    ends = {k: v for k, v in s.items() if k.startswith("episode/ended_")}
    assert abs(sum(ends.values()) - 1.0) < 1e-6, ends  # one reason per episode
    assert s["episode/turns_mean"] <= 2 and ends["episode/ended_max_turns"] > 0
    assert s["episode/tool_calls_mean"] > 0


@pytest.mark.slow
def test_a_failed_sandbox_marks_only_its_episode():
    env = ScriptedEnv(["4"], fail_every=3)
    _, _, e = _run(env)
    failed_B = np.array([v is not None and v.status == Status.SANDBOX_ERROR for v in e.verdicts])
    assert failed_B.any() and not failed_B.all()
    assert e.stats["episode/ended_sandbox_error"] == failed_B.mean()


def test_per_turn_rewards_sit_on_the_tokens_that_ended_their_turns():
    """Each reply's reward is at its call's last token (the '#' marker, a policy token, then
    the observation or the episode's end), nowhere else; rows that made no call have none."""
    env = ScriptedEnv(["3"], reward=-0.25)
    tok, _, e = _run(env, max_turns=3)
    ro, r_B_R = e.rollout, e.rollout.turn_rewards_B_R
    hash_id = tok.convert_tokens_to_ids("#")
    at = np.argwhere(r_B_R != 0)
    assert len(at) == env.calls > 0, (len(at), env.calls)
    np.testing.assert_array_equal(r_B_R[r_B_R != 0], -0.25)
    for row, col in at:
        assert ro.tokens_B_R[row, col] == hash_id and ro.loss_mask_B_R[row, col] == 1
        # An observation follows, or the episode ended there (no room left for one).
        assert ro.loss_mask_B_R[row, col + 1] == 0
    assert e.stats["episode/turn_reward_mean"] == pytest.approx(-0.25 * env.calls / 16)


def test_every_rows_final_text_is_its_last_policy_turn():
    """Rows end at different turns; each one's final text (what the verifier reads) is its
    own last run of policy tokens, whatever later turns of other rows did (a later extend
    once reset every row's turn start: all of a step's answers were read as empty)."""
    env = ScriptedEnv(["12"])
    tok, _, e = _run(env, max_turns=4)
    ro = e.rollout
    turns = []
    for r in range(len(ro.tokens_B_R)):
        policy = np.flatnonzero(ro.loss_mask_B_R[r] == 1)
        runs = np.split(policy, np.flatnonzero(np.diff(policy) > 1) + 1)
        turns.append(len(runs))
        ids = [t for t in ro.tokens_B_R[r, runs[-1]].tolist() if t != tok.eos_token_id]
        assert e.texts[r] == tok.decode(ids, skip_special_tokens=True), r
    assert len(set(turns)) > 1, turns  # rows that ended at different turns


class Lifecycle(ScriptedEnv):
    """Counts opens and closes; its step raises `fail` once it has answered `fail_at` calls;
    its opens fail for the rows in `failed`; its finish gives `verdict` to every episode."""

    def __init__(self, fail=None, fail_at=0, failed=(), verdict=None):
        super().__init__(["4"])
        self.fail, self.fail_at, self.failed, self.verdict = fail, fail_at, set(failed), verdict
        self.opened, self.closed = [], []

    def open(self, contexts):
        eps = super().open(contexts)
        for i, e in enumerate(eps):
            e.failed = "no sandbox" if i in self.failed else ""
        self.opened += eps
        return eps

    def step(self, eps, turns):
        if self.fail is not None and self.calls >= self.fail_at:
            raise self.fail
        return super().step(eps, turns)

    def finish(self, eps, final_texts):
        return [self.verdict] * len(eps)

    def close_episodes(self, eps):
        self.closed += eps
        super().close_episodes(eps)


@pytest.mark.parametrize("fail", [RuntimeError("a bug in environment code"),
                                  KeyboardInterrupt()])
def test_every_episode_is_closed_on_every_path(fail):
    """An exception in environment code, or a stop signal (Ctrl-C), mid-batch: every episode
    opened is closed; a normal end closes them too."""
    env = Lifecycle(fail=fail, fail_at=1)
    with pytest.raises(type(fail)):
        _run(env)
    assert env.opened and env.closed == env.opened and all(e.closed for e in env.opened)
    done = Lifecycle()
    _run(done)
    assert done.closed == done.opened and len(done.opened) == 16


def test_an_environment_verdict_overrules_and_a_failed_open_masks_its_episode():
    from rlvr_jax.types import Verdict

    env = Lifecycle(failed={3}, verdict=Verdict(Status.PASS, "final state"))
    _, _, e = _run(env)
    assert e.verdicts[3].status == Status.SANDBOX_ERROR and "no sandbox" in e.verdicts[3].detail
    assert all(v.status == Status.PASS for r, v in enumerate(e.verdicts) if r != 3)
    assert env.closed == env.opened


def test_a_huge_observation_is_cut_before_it_is_tokenized_with_the_same_ids():
    """Only the first (limit + 1) x (the longest token's characters) of a reply are
    tokenized: the ids are those of tokenizing it whole, for replies of any size."""
    tok, _, _ = _setup()
    glue = episodes.Glue.of(tok, "[", "]")
    for text in ("12" * 50_000, "a b " * 30_000, "x" * 5):
        whole = dataclasses.replace(glue, token_chars=10 ** 9)
        assert glue.ids(text, 12) == whole.ids(text, 12)
    ids, cut = glue.ids("9" * (10 << 20), 12)  # 10 MB: a bounded slice is encoded
    assert cut and len(ids) == 12


class Shown(ScriptedEnv):
    """Shows `text` at reset to the rows in `rows` (Episode.observation)."""

    def __init__(self, text, rows):
        super().__init__(["4"])
        self.text, self.rows = text, set(rows)

    def open(self, contexts):
        eps = super().open(contexts)
        for i, e in enumerate(eps):
            e.observation = self.text if i in self.rows else ""
        return eps


def test_a_first_observation_precedes_the_first_turn_and_changes_no_other_row():
    """What an environment shows at reset is its ids verbatim at the row's first columns
    (attended, never trained on); rows shown nothing sample exactly what they sample in a
    run where no row is shown anything."""
    tok, glue, shown = _run(Shown("ls: a.py b.py", rows=range(0, 16, 2)), o=20)
    _, _, plain = _run(Shown("", rows=()), o=20)
    want, _ = glue.ids("ls: a.py b.py", 20)
    a, p = shown.rollout, plain.rollout
    for r in range(16):
        if r % 2 == 0:
            assert a.tokens_B_R[r, :len(want)].tolist() == want
            assert a.loss_mask_B_R[r, :len(want)].sum() == 0
            assert a.mask_B_R[r, :len(want)].all() and a.loss_mask_B_R[r, len(want)] == 1
        else:
            assert np.array_equal(a.tokens_B_R[r], p.tokens_B_R[r])
            assert np.array_equal(a.logp_B_R[r], p.logp_B_R[r])
    assert p.loss_mask_B_R[:, 0].all()
