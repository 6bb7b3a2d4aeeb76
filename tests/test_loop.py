"""The RL loop end to end on a tiny model (8 fake CPU devices): exact resume for GRPO and for
PPO with DAPO's pieces, and a codegen run through hostile completions (the entry point:
tests/test_train.py; the run's life: tests/test_run_control.py)."""

import json

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from rlvr_jax import jobs
from tests.helpers import TINY, run_config

pytestmark = pytest.mark.slow  # see pyproject.toml: not in the daily `-m "not slow"` run



def _restore(path):
    with ocp.StandardCheckpointer() as ckptr:
        return ckptr.restore(path)


# The loop state beyond params must survive a restart: PPO's critic, its optimizer state and
# the adaptive KL coefficient, and DAPO's carried-over groups (dynamic sampling). One run
# combines them (PPO with DAPO's sampling pieces) to keep the suite short.
PPO_DAPO = ["algo=ppo", "algo.ppo.kl_in_reward=true", "algo.loss.kl_coef=0.05", "algo.ppo.kl_target=0.5",
            "algo.ppo.critic_warmup_steps=1", "algo.dapo.dynamic_sampling=true",
            "algo.dapo.sampled_prompts_per_step=8", "algo.dapo.overlong_buffer_tokens=1",
            "algo.dapo.mask_truncated=true",
            # each group's prompt computed once (critic, reference and policy forwards)
            "algo.share_prompts=true"]


# Multi-turn tool use: 3-digit products with the calculator in the sandbox (issue 27), with
# PPO: its critic and GAE run over the policy's tokens across the observations; the episodes
# streamed through 8 decode rows (issue 40), rows released during calls, each call delayed
# by a random latency: nothing may depend on when a call comes back. One step off-policy,
# with episodes carried across updates (the next batch's started in the rows a batch's last
# episodes free): the restart rebuilds them, their sessions and a call in flight.
CALC_AGENT = ["task.operators=[*]", "task.operand_digits=3", "task.zero_pad_operands=false",
              "env.kind=tools", "env.demo_tool_fraction=1.0",
              "sampling.max_new_tokens=64", "warmup.steps=40", "env.workers=1", "algo=ppo",
              # per-turn rewards at the calls' tokens, through GAE
              "+env.turn_rewards.tool_error=-0.1", "+env.turn_rewards.malformed=-0.1",
              "algo.share_prompts=true", "rollout.stream.rows=8",
              "rollout.stream.insert_rows=3", "rollout.stream.chunk_steps=8",
              "rollout.stream.release_rows=true", "rollout.stream.carry_batches=1",
              "rollout.off_policy_steps=1", "algo.loss.correction=token",
              "env.wrap=experiments.bench.env_latency:quick"]


# reasoning-gym's datasets (issue 28): the stream regenerated from (seed, batch), scored in
# the sandbox; the mixture's per-source metrics must survive the restart too.
GYM = ["verifier.workers=1", "verifier.overlap_chunks=1"]  # on +experiment=gym_mix


NO_EVAL = ["eval.num_problems=0", "eval.sequences_per_batch=12"]


@pytest.mark.parametrize("extra", [[], PPO_DAPO, CALC_AGENT, GYM],
                         ids=["grpo", "ppo+dapo", "tools", "reasoning_gym"])
def test_resume_is_exact(tmp_path, extra):
    """4 steps in one go == 2 steps, a restart, and 2 more (bitwise on CPU)."""
    if extra is CALC_AGENT or extra is GYM:
        from tests.helpers import UNAVAILABLE

        if UNAVAILABLE:
            pytest.skip(f"no sandbox: {UNAVAILABLE}")
    if extra is GYM:
        pytest.importorskip("reasoning_gym")
    preset = "gym_mix" if extra is GYM else "math_grpo"
    overrides = [f"+experiment={preset}", "num_steps=4", "verifier.reward_scheme=format_penalty",
                 *TINY, *extra, f"warmup.shared_dir={tmp_path / 'warm'}"] + (
                     # [grpo] evaluates after the restart as without it; [tools] evaluates
                     # its uninterrupted run only (the evaluations change no training), and
                     # the batch a run without evaluations would use (12 on 8 devices) is not
                     # refused
                     [] if not extra or extra is CALC_AGENT else NO_EVAL)
    once = jobs.run(run_config(overrides, tmp_path / "once"))
    overrides += NO_EVAL if extra is CALC_AGENT else []
    twice_dir = tmp_path / "twice"
    first = jobs.run(run_config(overrides + ["stop_after_steps=2"], twice_dir))
    assert first == {"stopped_at_step": 2, "reason": "stop_after_steps"}
    assert not (twice_dir / "summary.json").exists()
    second = jobs.run(run_config(overrides, twice_dir))
    if not extra:  # the evaluation after the restart is the uninterrupted run's
        for key in ("eval/sampled_accuracy_end", "eval/greedy_accuracy_end"):
            assert key in second and once[key] == second[key], key
    a = _restore(str(tmp_path / "once" / "checkpoints" / "4" / "state"))
    b = _restore(str(twice_dir / "checkpoints" / "4" / "state"))
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)
    rows = [json.loads(line) for line in (twice_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    once_rows = [json.loads(line) for line in (tmp_path / "once" / "metrics.jsonl").read_text()
                 .splitlines()]
    once_steps = [r for r in once_rows if "reward/mean" in r]
    for key in ("train/loss", "train/kl_coef", "reward/mean"):
        assert [r[key] for r in steps] == [r[key] for r in once_steps], key
    if extra is GYM:
        for key in ("source/chain_sum/reward_mean", "source/spell_backward/sequences"):
            assert [r.get(key) for r in steps] == [r.get(key) for r in once_steps], key
        assert any("source/chain_sum/sequences" in r for r in steps)
    if extra is PPO_DAPO:
        assert any(r["dynamic/carried_in"] > 0 for r in steps[2:]), "no carry crossed the restart"
        assert all(r["compiles/train_step"] == 1 for r in steps)
    if extra is CALC_AGENT:  # episodes of 1..4 turns, one compile per sampler piece
        assert any(r["episode/tool_calls_mean"] > 0 for r in steps), "no tool was called"
        # (extend: only for observations appended in place, which released rows never are)
        for piece in ("turn_empty", "turn_prompts", "turn_insert", "turn_decode",
                      "turn_resume", "turn_rows"):
            counts = [r[f"compiles/sampler_{piece}"] for r in steps
                      if f"compiles/sampler_{piece}" in r]  # extend: once a call was made
            assert counts and set(counts) == {1}, (piece, counts)
        for key in ("episode/turns_mean", "episode/tool_calls_mean",
                    "episode/turn_reward_mean", "rollout/version_lag_mean",
                    "stream/carried_episodes"):
            assert [r[key] for r in steps] == [r[key] for r in once_steps], key
        # Tokens sampled one and two updates back (carried): the lag bound d + W = 2.
        assert max(r["rollout/version_lag_max"] for r in steps) == 2
        assert all(1 <= r["rollout/version_lag_mean"] <= 2 for r in steps[1:])
        # The offline evaluation CLI runs the episodes as the run's own evaluation did: on
        # the same problems, batches and draws it gives the run's final numbers back.
        from rlvr_jax.evaluate import evaluate_model

        out = evaluate_model(str(tmp_path / "once"), None, n=1, ks=[1], temperature=1.0,
                             max_new_tokens=None, num_problems=8, batch=8)
        assert out["tools"] == ["calculator"] and out["step"] == 4
        end = [r for r in once_rows if "eval/sampled_accuracy" in r][-1]
        assert out["greedy"]["accuracy"] == once["eval/greedy_accuracy_end"]
        statuses = {k: v for k, v in out["sampled_T1_n1"].items() if k.startswith("status/")}
        assert statuses == {k[len("eval/sampled_"):]: v for k, v in end.items()
                            if k.startswith("eval/sampled_status/")}, statuses
        assert out["sampled_T1_n1"]["accuracy"] == end["eval/sampled_accuracy"]


HOSTILE = [
    "def f(x):return x**999",  # a huge int: its comparison with a float overflowed on the host
    "def f(x):return 10**5000",  # past JSON's integer limit
    "def f(x):\n    class E(BaseException):\n        def __str__(self): raise ValueError\n"
    "    raise E()",  # an exception that escapes `except Exception` and cannot be printed
    "def f(x):return float('nan')",
    "def f(x):\n    v = 0\n    for _ in range(300): v = [v]\n    return v",  # nested past 100
    "import sys\nsys.setrecursionlimit(10**6)\ndef f(x):return f(x)",  # overflows the C stack
]


def test_a_codegen_run_scores_hostile_completions(tmp_path, monkeypatch):
    """Issue 24: a codegen RL run in which every third completion is replaced by a program
    returning huge ints or raising odd exceptions finishes, with those samples scored (wrong,
    runtime_error), none masked as a sandbox error and no crash."""
    from rlvr_jax.tasks.codegen import CodegenTask
    from tests.helpers import UNAVAILABLE

    if UNAVAILABLE:
        pytest.skip(f"no sandbox: {UNAVAILABLE}")
    honest = CodegenTask.verify_jobs

    def hostile(specs, completions):
        texts = [HOSTILE[i // 3 % len(HOSTILE)] if i % 3 == 0 else c
                 for i, c in enumerate(completions)]
        return honest(specs, texts)

    monkeypatch.setattr(CodegenTask, "verify_jobs", staticmethod(hostile))
    overrides = ["+experiment=code_grpo", "num_steps=2", *TINY, "warmup.steps=4",
                 "verifier.overlap_chunks=2"]
    summary = jobs.run(run_config(overrides, tmp_path / "run"))
    assert "eval/sampled_accuracy_end" in summary
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["status/sandbox_error"] == 0, r
        assert r["status/runtime_error"] >= 1 and r["status/wrong"] >= 1, r
