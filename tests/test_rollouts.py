"""rollouts.take's schedule (which params sample which batch, each batch started once, the
order of starts and finishes, a resume), the snapshot the producer owns against the update's
donation, and asynchronous runs end to end: bitwise repeatable across a stop and resume, the
4 + 4 device split against shared devices (8 fake CPU devices)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr_jax import jobs, rollouts
from tests.helpers import TINY, run_config


class Recorder:
    """begin / finish / snapshot that record what the producer does, in order."""

    def __init__(self):
        self.events = []

    def begin(self, j, params, version):
        self.events.append(("begin", j, params, version))
        return rollouts.Started([j], None, None, None, version)

    def finish(self, started):
        self.events.append(("finish", started.problems[0]))
        return rollouts.Made(started.problems, None, None, None, None, started.version)

    def snapshot(self, params):
        return ("copy", params)


def _run(d, steps, last, ahead=None, first=0):
    rec = Recorder()
    ahead = ahead or rollouts.fresh(d)
    made = []
    for k in range(first, steps):
        ahead, m = rollouts.take(ahead, k, f"theta{k}", begin=rec.begin, finish=rec.finish,
                                 snapshot=rec.snapshot, off_policy_steps=d, last=last)
        made.append(m)
    return rec, ahead, made


def test_synchronous_take_samples_each_step_with_the_states_own_params():
    rec, ahead, made = _run(0, 3, 3)
    assert rec.events == [("begin", 0, "theta0", 0), ("finish", 0),
                          ("begin", 1, "theta1", 1), ("finish", 1),
                          ("begin", 2, "theta2", 2), ("finish", 2)]  # no copy, no lag
    assert ahead == rollouts.Ahead((), ())


@pytest.mark.parametrize("d", [1, 2])
def test_batch_k_is_sampled_with_the_params_from_before_update_k_minus_d(d):
    rec, ahead, made = _run(d, 6, 6)
    begins = [e for e in rec.events if e[0] == "begin"]
    assert [e[1] for e in begins] == list(range(6))  # every batch started once, in order
    for _, j, params, version in begins:
        assert version == max(0, j - d)
        assert params == ("copy", f"theta{version}")  # a snapshot, never the state's own
    assert [m.problems[0] for m in made] == list(range(6))
    assert [m.version for m in made] == [max(0, k - d) for k in range(6)]
    # Batch k+d is started before batch k is finished: its verification overlaps update k.
    order = [(e[0], e[1]) for e in rec.events]
    for k in range(6 - d):
        assert order.index(("begin", k + d)) < order.index(("finish", k))
    assert ahead.started == ()  # nothing started past the run's end
    assert ahead.behind == tuple(("copy", f"theta{k}") for k in range(6 - d, 6))


@pytest.mark.parametrize("d", [1, 2])
def test_a_resume_restarts_the_batches_in_flight_from_their_snapshots(d):
    """Stopped after step 3: the checkpoint holds `behind`; resuming at 3 starts batches
    3 .. 3+d-1 from them and then goes on as the run that never stopped."""
    whole, _, made_whole = _run(d, 6, 6)
    _, ahead, _ = _run(d, 3, 3)  # an invocation that ends at step 3 (stop_after_steps)
    resumed, _, made_resumed = _run(d, 6, 6, rollouts.fresh(d, ahead.behind), first=3)
    begins = lambda rec: {e[1]: (e[2], e[3]) for e in rec.events if e[0] == "begin"}
    assert all(begins(resumed)[j] == begins(whole)[j] for j in range(3, 6))
    assert [m.version for m in made_resumed] == [m.version for m in made_whole[3:]]


def test_a_producer_failure_ends_the_step_and_no_batch_is_reused():
    """An exception while starting or finishing a batch reaches the loop (its traceback, no
    hang) and the caller's state is not advanced: nothing stale is trained on."""
    rec = Recorder()

    def begin(j, params, version):
        if j == 3:
            raise RuntimeError("sampler failed on batch 3")
        return rec.begin(j, params, version)

    kw = dict(begin=begin, finish=rec.finish, snapshot=rec.snapshot, off_policy_steps=1,
              last=6)
    ahead = rollouts.fresh(1)
    for k in range(2):
        ahead, _ = rollouts.take(ahead, k, f"theta{k}", **kw)
    before = ahead
    with pytest.raises(RuntimeError, match="batch 3"):
        rollouts.take(ahead, 2, "theta2", **kw)
    assert before.started[0].result().problems == [2]  # still the one batch in flight


def test_the_producers_snapshot_survives_the_updates_donation():
    """The update donates the state; a sampler holding the state's own buffers (what a
    concurrent producer would read without a snapshot) reads deleted arrays."""
    params = {"policy": {"w": jnp.arange(6.0)}, "value": {"v": jnp.ones(3)}}
    update = jax.jit(lambda p: jax.tree.map(lambda x: x + 1, p), donate_argnums=0)
    snap = rollouts.copy_policy(params)
    aliased = {"policy": params["policy"]}  # no copy: today's sampler arguments
    assert "value" not in snap  # the critic is not copied
    new = update(params)
    assert aliased["policy"]["w"].is_deleted()  # the hazard the snapshot removes
    assert not snap["policy"]["w"].is_deleted()
    np.testing.assert_array_equal(snap["policy"]["w"], np.arange(6.0))
    np.testing.assert_array_equal(new["policy"]["w"], np.arange(6.0) + 1)


# ------------------------------------------------------------------ end to end (slow)
ASYNC = ["+experiment=math_grpo", "num_steps=4", *TINY, "rollout.off_policy_steps=1",
         "algo.loss.correction=token", "eval.num_problems=0"]  # no evaluation: params compared


def _steps(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "reward/mean" in r]


def _state(run_dir, step=4):
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as ckptr:
        return ckptr.restore(str(run_dir / "checkpoints" / str(step) / "state"))


@pytest.mark.slow
def test_an_async_run_is_bitwise_repeatable_across_a_stop_and_resume(tmp_path):
    overrides = ASYNC + [f"warmup.shared_dir={tmp_path / 'warm'}"]
    once = jobs.run(run_config(overrides, tmp_path / "once"))
    first = jobs.run(run_config(overrides + ["stop_after_steps=2"], tmp_path / "twice"))
    assert first == {"stopped_at_step": 2, "reason": "stop_after_steps"}
    assert (tmp_path / "twice" / "checkpoints" / "2" / "behind").is_dir()
    second = jobs.run(run_config(overrides, tmp_path / "twice"))
    assert "eval/sampled_accuracy_end" not in once | second  # eval.num_problems=0
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)),
                 _state(tmp_path / "once"), _state(tmp_path / "twice"))
    a, b = _steps(tmp_path / "once"), _steps(tmp_path / "twice")
    for key in ("train/loss", "reward/mean", "rollout/staleness", "train/is_weight_mean"):
        assert [r[key] for r in a] == [r[key] for r in b], key
    assert [r["rollout/staleness"] for r in a] == [0, 1, 1, 1]
    assert once["compiles"]["sampler"] == 1 and once["compiles"]["train_step"] == 1


@pytest.mark.slow
def test_a_verification_failure_in_an_async_run_ends_it_with_its_error(tmp_path, monkeypatch):
    from rlvr_jax import stages

    real, calls = stages.finish_sampling, []

    def failing(sampling):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the verifier pool died")
        return real(sampling)

    monkeypatch.setattr(stages, "finish_sampling", failing)
    with pytest.raises(RuntimeError, match="verifier pool died"):
        jobs.run(run_config(ASYNC + [f"warmup.shared_dir={tmp_path / 'warm'}"], tmp_path / "r"))
    steps = _steps(tmp_path / "r")
    assert [r["step"] for r in steps] == [1, 2]  # batch 3 never trained on


@pytest.mark.slow
def test_the_sampler_on_its_own_devices_trains_as_on_shared_ones(tmp_path, monkeypatch):
    """4 + 4 of the 8 devices against all 8 shared: the same tokens (rewards), the same
    params to float32 rounding (the update's data-parallel sums run over 4 devices, not 8).
    Split, the batches ahead are sampled on the producer thread (while the update runs)."""
    import threading

    from rlvr_jax import stages

    overrides = ASYNC + [f"warmup.shared_dir={tmp_path / 'warm'}"]
    shared = jobs.run(run_config(overrides, tmp_path / "shared"))
    real, threads = stages.begin, []

    def begin(*args, **kw):
        threads.append(threading.current_thread().name)
        return real(*args, **kw)

    monkeypatch.setattr(stages, "begin", begin)
    split = jobs.run(run_config(overrides + ["rollout.sampler_devices=4"], tmp_path / "split"))
    assert sum(t.startswith("producer") for t in threads) == 4  # batches 0 (start) .. 3
    a, b = _steps(tmp_path / "shared"), _steps(tmp_path / "split")
    assert [r["reward/mean"] for r in a] == [r["reward/mean"] for r in b]
    np.testing.assert_allclose([r["train/loss"] for r in a], [r["train/loss"] for r in b],
                               rtol=1e-4, atol=1e-6)
    params = lambda d: (lambda s: s["params"] if isinstance(s, dict) else s[1])(_state(d))
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y),
                                                         atol=2e-5),
                 params(tmp_path / "shared"), params(tmp_path / "split"))
    assert split["compiles"]["sampler"] == 1
