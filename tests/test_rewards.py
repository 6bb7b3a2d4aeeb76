"""Reward tables per scheme; sandbox errors are masked out of the loss, never scored."""

import numpy as np
import pytest

from rlvr_jax import rewards
from rlvr_jax.types import Status, Verdict


def test_sandbox_errors_are_masked_not_scored():
    from rlvr_jax import rewards
    from rlvr_jax.types import Status, Verdict

    verdicts = [Verdict(Status.PASS), Verdict(Status.SANDBOX_ERROR), Verdict(Status.WRONG),
                Verdict(Status.PASS)]
    w = rewards.loss_weights(verdicts)
    np.testing.assert_array_equal(w, [1, 0, 1, 1])
    r = rewards.from_verdicts(verdicts, "signed").reshape(1, 4)
    fixed = rewards.impute_invalid(r, w.reshape(1, 4))
    np.testing.assert_allclose(fixed, [[1, 1 / 3, -1, 1]], rtol=1e-6)  # the valid mean
    # Every failure status has a reward in every table; SANDBOX_ERROR is in none.
    for table in rewards.REWARD_TABLES.values():
        assert set(table) == set(Status) - {Status.SANDBOX_ERROR}


def test_reward_schemes_pinned():
    from rlvr_jax import rewards
    from rlvr_jax.types import Status, Verdict

    vs = [Verdict(Status.PASS, fraction=1.0), Verdict(Status.WRONG, fraction=0.6),
          Verdict(Status.SYNTAX_ERROR), Verdict(Status.RUNTIME_ERROR), Verdict(Status.TIMEOUT),
          Verdict(Status.UNPARSEABLE), Verdict(Status.WRONG)]
    np.testing.assert_allclose(rewards.from_verdicts(vs, "binary"), [1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(rewards.from_verdicts(vs, "signed"), [1, -1, -1, -1, -1, -1, -1])
    np.testing.assert_allclose(rewards.from_verdicts(vs, "code_penalty"),
                               [1, -1, -5, -3, -1, -5, -1])
    np.testing.assert_allclose(rewards.from_verdicts(vs, "graded"), [1, 0.6, 0, 0, 0, 0, 0],
                               rtol=1e-6)


def test_reward_tables_and_counts():
    verdicts = [Verdict(Status.PASS), Verdict(Status.WRONG), Verdict(Status.UNPARSEABLE)]
    np.testing.assert_array_equal(rewards.from_verdicts(verdicts, "binary"), [1, 0, 0])
    np.testing.assert_array_equal(rewards.from_verdicts(verdicts, "signed"), [1, -1, -1])
    np.testing.assert_array_equal(rewards.from_verdicts(verdicts, "format_penalty"), [1, 0, -1])
    counts = rewards.status_counts(verdicts[:1])
    assert counts == {f"status/{s.name.lower()}": int(s == Status.PASS) for s in Status}
    for table in rewards.REWARD_TABLES.values():  # a sandbox error is masked, never scored
        assert set(table) == set(Status) - {Status.SANDBOX_ERROR}


def test_the_breaker_stops_past_the_share_of_sandbox_errors():
    """verifier.max_infra_share: more than that share of a step's samples masked as sandbox
    errors stops the run (one line: the step, the count, an example); at or under it, not."""
    from rlvr_jax.rewards import InfrastructureFailing, breaker

    ok, lost = Verdict(Status.PASS, ""), Verdict(Status.SANDBOX_ERROR, "the machine was lost")
    breaker([lost, lost, ok, ok], 0.5, 3)  # 50%: trained on (masked)
    breaker([ok, Verdict(Status.WRONG, "")], 0.0, 3)
    with pytest.raises(InfrastructureFailing, match=r"step 4: 3 of 4 samples were sandbox "
                       r"errors \(75% > verifier.max_infra_share=0.5\).*machine was lost"):
        breaker([lost, lost, lost, ok], 0.5, 3)
    breaker([lost] * 4, 1.0, 0)  # 1: off
