"""The goal-state tasks of the stateful demonstrations (tasks/inventory.py on `api`,
tasks/bugfix.py on `workspace`): their demonstrated episodes, run as calls in the real
environment, reach the goal (what the warm start shows is what the world answers); doing
nothing, or the controls of experiments/stateful, does not; held-out problems are never
trained on. Needs bubblewrap (a failure in CI, see helpers)."""

import numpy as np
import pytest

from experiments.stateful import controls
from rlvr_jax.envs import make_session_environment
from rlvr_jax.sandbox.session import SessionLimits
from rlvr_jax.tasks.bugfix import BugfixTask
from rlvr_jax.tasks.inventory import InventoryTask
from rlvr_jax.types import Status
from tests.helpers import UNAVAILABLE

pytestmark = [pytest.mark.xdist_group("sandbox"),
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]


def _episodes(kind, task, wrap=None, n=6):
    """Each problem's demonstrated calls run in `kind`: (observations seen, demos,
    verdicts of the demonstrated episodes, verdicts of episodes that did nothing)."""
    env = make_session_environment(kind, "tag", limits=SessionLimits(), spares=0)
    if wrap is not None:
        env = wrap(env, None)
    try:
        problems = task.train_batch(0, 0, n)
        demos = [task.tool_demonstration(p, np.random.default_rng(0)) for p in problems]
        acted = env.open([task.tool_context(p) for p in problems])
        idle = env.open([task.tool_context(p) for p in problems])
        try:
            seen = []
            for c in range(len(demos[0]["calls"])):
                replies = env.step(acted, [env.render_call(*d["calls"][c][:2]) for d in demos])
                seen.append([r.text for r in replies])
            return (seen, demos, env.finish(acted, [""] * n), env.finish(idle, [""] * n))
        finally:
            env.close_episodes(acted + idle)
    finally:
        env.close()


@pytest.mark.parametrize("kind,task", [("api", InventoryTask()), ("workspace", BugfixTask())])
def test_the_demonstrated_episode_reaches_the_goal_and_doing_nothing_does_not(kind, task):
    seen, demos, acted, idle = _episodes(kind, task)
    for c, texts in enumerate(seen):
        assert texts == [d["calls"][c][2] for d in demos]  # the demo shows what the world says
    assert [v.status for v in acted] == [Status.PASS] * len(acted)
    assert all(v.status == Status.WRONG for v in idle)
    held = {task.key(p) for p in task.heldout_set(50)}
    assert not held & {task.key(p) for p in task.train_batch(0, 1, 200)}


def test_the_inventory_collapses_when_writes_are_dropped():
    seen, demos, acted, _ = _episodes("api", InventoryTask(), wrap=controls.drop_writes)
    assert seen[0] == [d["calls"][0][2] for d in demos]  # reads still run
    assert all(v.status == Status.WRONG for v in acted)


def test_bugfix_problems_have_exactly_one_wrong_part():
    for p in BugfixTask().train_batch(0, 0, 200):
        assert p.wrong != p.right
        assert sum(a != b for a, b in zip(p.bug, (p.mul, p.op, p.add))) == 1
        assert any(p.value(x) != eval(p.wrong, {"x": x}) for x in (-7, 0, 1, 3))
