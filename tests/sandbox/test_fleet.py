"""Verification on a Ray cluster (rlvr_jax/sandbox/fleet.py, issue 41), on a local cluster
of three nodes started as processes on 127.0.0.1 (a head without the sandbox resource, two
fleet machines with it): the verdicts equal the local pool's for the same batch; a machine
lost in the middle of a batch gives sandbox_error for its slice only, its actor is replaced
on the live machine and the next batch is verified whole. Needs bubblewrap and the Ray extra
(both installed in CI; tests/test_config.py: backend=ray without the extra)."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from experiments.bench.fleet import node_pids, start_cluster, stop_cluster
from rlvr_jax.types import Status
from tests.helpers import UNAVAILABLE

ray = pytest.importorskip("ray") if not os.environ.get("RLVR_REQUIRE_SANDBOX") else __import__(
    "ray")  # CI installs the extra: there it must run

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sandbox"),
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]

def _job(program, expected=(1,)):
    return {"completion": program, "entry_point": "f", "inputs": [[0]],
            "expected": list(expected)}


BATCH = [_job("def f(x):\n    return x + 1"), _job("def f(x):\n    return x"),
         _job("def f(x):\n    raise ValueError('no')"), _job("def f(x):\n    while True: pass"),
         _job("import os\ndef f(x):\n    return len(os.listdir('/proc')) * 0 + 1"),
         _job("def f(x):\n    return x + 1  # another")]


@pytest.fixture(scope="module")
def cluster():
    tmp = f"/tmp/rlvr_ray_{os.getpid()}"
    try:
        yield start_cluster(2, 2, tmp)  # two fleet machines, 2 pools each
    finally:
        if ray.is_initialized():
            ray.shutdown()
        stop_cluster(tmp)


def _same(got, want):
    assert [(v.status, v.detail, v.fraction, v.parts) for v in got] == [
        (v.status, v.detail, v.fraction, v.parts) for v in want]


def _fleet(address, actors=2):
    from rlvr_jax.verify.verifiers import make_verifier
    from rlvr_jax.config.fleet import FleetConfig

    return make_verifier("code", workers=1, timeout_s=2.0, batch_timeout_s=None,
                         mode="forkserver", fleet=FleetConfig(
                             address=address, namespace="rlvr-test", actors=actors,
                             call_timeout_s=60.0))


def _repl(fleet=None):
    from rlvr_jax import envs
    from rlvr_jax.sandbox.session import SessionLimits

    return envs.make_session_environment("python_repl", "tag", limits=SessionLimits(call_s=5.0),
                                         max_live=32, spares=2, fleet=fleet)


def _calls(env, eps, codes):
    return env.step(eps, [env.render_call("python", {"code": c}) for c in codes])


def test_episode_sessions_on_the_fleet_equal_local_and_a_lost_machine_fails_its_own(cluster):
    """env.backend=ray: each episode's session lives on one actor and keeps its state across
    calls; the replies equal the local backend's. A machine lost between two calls fails the
    sessions it held (sandbox_error: the episodes masked) and no other; new episodes open on
    the replacement actor."""
    from rlvr_jax.config.fleet import FleetConfig

    codes = [[f"x = {k}" for k in range(6)], [f"x * 10 + {k}" for k in range(6)]]
    local = _repl()
    try:
        local.prepare([{} for _ in range(6)])
        assert len(local._sessions._spares) == 6
        eps = local.open([{} for _ in range(6)])
        want = [[(r.text, r.outcome) for r in _calls(local, eps, c)] for c in codes]
        local.close_episodes(eps)
    finally:
        local.close()
    assert want[1][3] == ("33", "ok"), want  # each session kept its own x
    env = _repl(FleetConfig(address=cluster, namespace="rlvr-test", actors=2))
    pool = env._sessions
    try:
        env.prepare([{} for _ in range(6)])  # each actor starts its share ahead (3 each)
        eps = env.open([{} for _ in range(6)])
        assert [e.failed for e in eps] == [""] * 6
        got = [[(r.text, r.outcome) for r in _calls(env, eps, c)] for c in codes]
        assert got == want
        on = [e.handle.actor for e in eps]  # round robin: 0, 1, 0, 1, ...
        victim = pool.actors[1]
        ray.kill(victim, no_restart=True)  # the actor's process gone with its sessions
        replies = _calls(env, eps, ["x"] * 6)
        lost = [r.outcome == "sandbox_error" for r in replies]
        assert lost == [a == 1 for a in on], (lost, on)
        assert [r.text for r, gone in zip(replies, lost) if not gone] == ["0", "2", "4"]  # kept
        assert all(e.failed for e, gone in zip(eps, lost) if gone)
        env.close_episodes(eps)
        assert env.stats()["session/actors_lost"] == 1
        fresh = env.open([{} for _ in range(2)])
        assert [r.outcome for r in _calls(env, fresh, ["1 + 1", "2 + 2"])] == ["ok", "ok"]
        env.close_episodes(fresh)
    finally:
        env.close()


def _children(pid: int) -> set[int]:
    """`pid`'s descendants (from /proc)."""
    parent = {}
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                parent[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    out, todo = set(), [pid]
    while todo:
        cur = todo.pop()
        kids = [c for c, pp in parent.items() if pp == cur]
        out.update(kids)
        todo += kids
    return out


def _actor_pids() -> set[int]:
    out = set()
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if f.read().startswith(b"ray::PoolActor"):
                    out.add(int(p))
        except (OSError, ValueError):
            pass
    return out


def test_a_killed_trainer_leaves_no_actor_or_sandbox(cluster):
    """SIGKILL of the trainer (no cleanup of its own runs): the cluster ends its actors (they
    are owned by the trainer's job, never detached) and their sandboxes die with them."""
    from tests.helpers import ROOT

    before = _actor_pids()
    code = ("import time\nfrom rlvr_jax.config.fleet import FleetConfig\n"
            "from rlvr_jax.verify.verifiers import make_verifier\n"
            "v = make_verifier('code', workers=2, timeout_s=2.0, batch_timeout_s=None, "
            f"mode='forkserver', fleet=FleetConfig(address='{cluster}', namespace='rlvr-kill'))\n"
            f"print([x.status.name for x in v.verify({BATCH[:2]!r})], flush=True)\n"
            "print('READY', flush=True)\ntime.sleep(600)\n")
    trainer = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        lines = []  # Ray may print its own lines (the machine lost above) among ours
        while "READY" not in lines and len(lines) < 100:
            lines.append(trainer.stdout.readline().strip())
        assert "READY" in lines and "['PASS', 'WRONG']" in lines, lines
        actors = _actor_pids() - before
        boxes = set().union(*(_children(a) for a in actors))
        assert len(actors) == 2 and boxes  # the pools' sandboxes are up
    finally:
        trainer.kill()
        trainer.wait()
    deadline = time.time() + 60
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in actors | boxes):
        time.sleep(0.5)
    left = [p for p in actors | boxes if os.path.exists(f"/proc/{p}")]
    assert not left, f"left after the trainer's SIGKILL: {left}"


def test_the_fleet_cap_holds_under_a_burst_and_opens_wait_for_room(cluster):
    """fleet.max_sessions: a burst of opens from 6 threads (2 sessions each) against a cap of
    4 never has more than 4 live; each open waits for room (back-pressure) instead of
    failing, every episode runs, and the waits are counted."""
    from concurrent.futures import ThreadPoolExecutor

    from rlvr_jax.config.fleet import FleetConfig

    env = _repl(FleetConfig(address=cluster, namespace="rlvr-test", actors=2, max_sessions=4))
    pool, peak = env._sessions, []

    def episode(k):
        eps = env.open([{}, {}])
        try:
            peak.append(pool._live)
            time.sleep(0.3)
            return [r.text for r in _calls(env, eps, [f"{k}", f"{k} + 1"])]
        finally:
            env.close_episodes(eps)

    try:
        with ThreadPoolExecutor(6) as threads:
            got = list(threads.map(episode, range(6)))
        assert got == [[str(k), str(k + 1)] for k in range(6)]
        assert max(peak) <= 4 and pool._live == 0
        row = env.stats()
        assert row["session/admission_waited"] >= 1 and row["session/admission_wait_s"] > 0
        assert row["session/admission_queue_peak"] >= 2, row
        with pytest.raises(ValueError, match="fleet.max_sessions"):
            env.open([{}] * 5)  # more than the cap at once: a configuration error
    finally:
        env.close()


def test_a_cluster_without_the_resource_is_one_clear_error(cluster):
    """No machine declares fleet.resource, or too few units of it for a process's actors
    (the others held by other processes and runs): one error saying so, not actors waiting
    for a place while every call masks its episodes."""
    from rlvr_jax.config.fleet import FleetConfig
    from rlvr_jax.sandbox.privilege import SandboxUnavailable
    from rlvr_jax.verify.verifiers import make_verifier

    with pytest.raises(SandboxUnavailable, match="declares the resource 'sandbox_gpu'"):
        make_verifier("code", workers=1, timeout_s=2.0, batch_timeout_s=None,
                      mode="forkserver", fleet=FleetConfig(address=cluster,
                                                           resource="sandbox_gpu"))
    with pytest.raises(SandboxUnavailable, match=r"[0-4] of this process's 5 PoolActors started"
                       r" within fleet.start_timeout_s=3 s.*has 4 in all, 0 free"):
        make_verifier("code", workers=1, timeout_s=2.0, batch_timeout_s=None,
                      mode="forkserver", fleet=FleetConfig(address=cluster, actors=5,
                                                           start_timeout_s=3.0))
    deadline = time.time() + 30  # the placed ones ended with it (their units freed)
    while ray.available_resources().get("sandbox") != 4 and time.time() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("sandbox") == 4


def test_the_fleet_bench_runs_on_a_running_cluster(cluster):
    """experiments/bench/fleet.py at toy size (verification and session calls), pointed at
    this cluster (`--address`)."""
    from tests.helpers import ROOT

    out = subprocess.run([sys.executable, "experiments/bench/fleet.py", "--jobs", "4",
                          "--repeats", "1", "--workers", "1", "--sessions", "2", "--address",
                          cluster], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| local pool | 1 |" in out.stdout, out.stdout
    assert re.search(r"\| Ray, \d machines? \| \d \| [0-9.]+ \|", out.stdout), out.stdout
    assert re.search(r"\| local session pool \| [0-9.]+ \| 1.00 \|", out.stdout), out.stdout
    assert re.search(r"\| Ray, \d machines? \| [0-9.]+ \| [0-9.]+ \|", out.stdout.split(
        "sessions on")[1]), out.stdout


class _FleetRepl:
    """A multi-turn environment for the episode drivers with both backends' pieces: a
    python_repl session per episode (on the fleet, or local) and a code verifier (the same)
    for the final verdicts. The tiny model's text is not Python, so each call runs a program
    fixed by (episode, call) that reads and extends the session's state; the verdict checks
    a program made from the episode's final text."""

    stop_texts, tools = ("#",), ("calculator",)  # the streaming tests' tiny model's
    observation_prefix, observation_suffix = "[", "]"
    concurrent_episodes = True

    def __init__(self, fleet=None):
        from rlvr_jax.verify.verifiers import make_verifier

        self.env = _repl(fleet)
        self.verifier = make_verifier("code", workers=1, timeout_s=5.0, batch_timeout_s=None,
                                      mode="forkserver", fleet=fleet)
        self.finished = 0

    def open(self, contexts):
        return self.env.open(contexts)

    def step(self, eps, turns):
        codes = [f"x = globals().get('x', {e.context['id']}) * 7 + {e.calls + len(t)}\nx % 97"
                 for e, t in zip(eps, turns)]
        return self.env.step(eps, [self.env.render_call("python", {"code": c}) for c in codes])

    def finish(self, eps, texts):
        self.finished += len(eps)
        return self.verifier.verify([_job(f"def f(x):\n    return {len(t) % 3}  # {t!r}")
                                     for t in texts])

    def close_episodes(self, eps):
        self.env.close_episodes(eps)

    def stats(self):
        return self.env.stats()

    def close(self):
        self.env.close()
        self.verifier.close()


def _two_process_worker(out: str, process_id: int, processes: int, port: int,
                        address: str) -> None:
    """One process of `test_two_jax_processes_on_one_cluster_equal_one` (a subprocess):
    episodes over a mesh of 2 devices, lock step and streamed (rows released, episodes
    carried to the next batch), their sessions and verdicts on the cluster at `address`
    (empty: this host's pools). One process: run in the test's own process, on 2 of its
    devices."""
    import jax
    import numpy as np

    if processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(f"127.0.0.1:{port}", processes, process_id)
    from rlvr_jax import episodes, sharding, streaming
    from rlvr_jax.config.fleet import FleetConfig
    from tests.test_streaming import _batches, _mesh_sampler, _pieces

    n, g = 16, 2
    tok, _, glue, params, *_ = _pieces(n, g)
    mesh = sharding.make_mesh(data=2, fsdp=1, devices=jax.devices()[:2])
    sampler = _mesh_sampler(mesh, g)
    params = jax.device_put(params, sharding.replicated(mesh))
    put = lambda x: jax.device_put(x, sharding.batch_sharding(mesh))
    fleet = FleetConfig(address=address, namespace="rlvr-test-2proc", actors=1,  # 4 units:
                        call_timeout_s=60.0) if address else None  # 2 processes x 2 kinds
    env = _FleetRepl(fleet)
    records = []
    try:
        batches = _batches(n, g, 2)
        prompt, pmask, key, contexts = batches[0]
        records.append(episodes.run(sampler, env, tok, glue, params, prompt, pmask, key,
                                    max_turns=3, put=put, contexts=contexts))
        stream = streaming.Stream(sampler, env, tok, glue, max_turns=3, put=put, group_size=g,
                                  schedule=streaming.Schedule(4, 2, 3, 1, release=True))
        try:
            for j in range(2):
                if j == 0:
                    stream.add(0, *batches[0])
                stream.add(j + 1, *_batches(n, g, 3)[j + 1])
                records.append(stream.run(params, 0, j))
        finally:
            stream.close()
        opened = env.stats()["session/opened"]
    finally:
        env.close()
    arrays = {f"{j}_{k}": np.asarray(x) for j, r in enumerate(records)
              for k, x in zip(r.rollout._fields, r.rollout) if x is not None}
    arrays.update({f"{j}_verdicts": np.array([[int(v.status), v.fraction] for v in r.verdicts])
                   for j, r in enumerate(records)})
    arrays.update({f"{j}_texts": np.array(r.texts) for j, r in enumerate(records)})
    np.savez(out, opened=opened, finished=env.finished, **arrays)


def test_two_jax_processes_on_one_cluster_equal_one(cluster, tmp_path):
    """2 trainer processes (jax.distributed, gloo) on one Ray cluster, each opening, calling
    and verifying its own block's episodes on the fleet, == 1 process on this host's pools:
    the episodes of the lock-step and the streamed drivers (carried across batches), their
    texts and verdicts, bitwise; each process's sessions and verdicts only its own rows'."""
    import numpy as np

    from tests.helpers import one_and_two_processes

    one, two = one_and_two_processes("tests.sandbox.test_fleet:_two_process_worker", tmp_path,
                                     2, here=("",), there=(cluster,))  # here: local pools
    skip = ("opened", "finished")
    for got in two:
        assert sorted(got.files) == sorted(one.files)
        for k in one.files:
            if k not in skip:
                np.testing.assert_array_equal(got[k], one[k], err_msg=k)
    # Each process opened and verified its own half of the episodes, on the fleet.
    assert [int(t["opened"]) for t in two] == [int(one["opened"]) // 2] * 2
    assert [int(t["finished"]) for t in two] == [int(one["finished"]) // 2] * 2
    statuses = set(np.concatenate([one[f"{j}_verdicts"][:, 0] for j in range(3)]).tolist())
    assert len(statuses) > 1, statuses  # verdicts of both kinds
    assert (one["0_mask_B_R"] == 1).sum() > (one["0_loss_mask_B_R"] == 1).sum()  # calls made


# Last: it takes a machine of the module's cluster away.
def test_verdicts_equal_the_local_pool_and_a_lost_machine_masks_its_slice(cluster):
    from rlvr_jax.sandbox.pool import VerifierPool

    with VerifierPool("code", workers=1, timeout_s=2.0, mode="forkserver") as local:
        want = local.verify(BATCH)
    assert [v.status for v in want][:4] == [Status.PASS, Status.WRONG, Status.WRONG,
                                            Status.TIMEOUT]
    fleet = _fleet(cluster)
    try:
        _same(fleet.verify(BATCH), want)
        nodes = ray.get([a.node.remote() for a in fleet.actors])
        assert len(set(nodes)) == 2  # spread over the machines
        # Machine 1 (actor 1's, the batch's second half) is lost while its jobs run.
        slow = [_job(f"import time\ndef f(x):\n    time.sleep(1.5)\n    return x + 1 # {i}")
                for i in range(4)]
        future = fleet.submit(slow)  # each actor: two jobs of 1.5 s, one after the other
        time.sleep(1.0)
        raylet = [n for n in ray.nodes() if n["NodeID"] == nodes[1]][0]
        machine = set(node_pids(raylet["RayletSocketName"]))  # its raylet and agents
        for pid in machine | set().union(*(_children(p) for p in machine)):  # and workers
            try:
                os.kill(pid, signal.SIGKILL)  # the whole machine at once
            except ProcessLookupError:
                pass
        got = future.result(timeout=120)
        assert [v.status for v in got] == [Status.PASS] * 2 + [Status.SANDBOX_ERROR] * 2, got
        assert "Ray actor was lost" in got[2].detail and fleet.lost == 1
        # The fleet recovers: a batch runs whole, the actor replaced on the live machine. Not
        # always the very next one: until Ray's failure detector marks the killed machine
        # dead (seconds, on a busy host), a replacement can be placed there and be lost in
        # turn, its slice masked as this one was, never scored.
        for _ in range(5):
            got = fleet.verify(BATCH)
            if all(v.status != Status.SANDBOX_ERROR for v in got):
                break
            assert {v.detail for v in got if v.status == Status.SANDBOX_ERROR} == {
                "the verifier's Ray actor was lost"}, got
            time.sleep(2.0)
        _same(got, want)
        assert set(ray.get([a.node.remote() for a in fleet.actors])) == {nodes[0]}
    finally:
        fleet.close()
