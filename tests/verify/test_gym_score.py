"""reasoning-gym's scorers in the sandbox (verify/gym_score.py): only a full score passes
(the padding hack earns a fraction, never a pass), answers that some scorers `eval` run
contained, one sample's answer cannot change another's verdict, and a scorer that hangs or
raises is the candidate's verdict, never a crash of the batch. Needs bubblewrap (a failure in
CI) and the `tasks` extra."""

import os

import pytest

from rlvr_jax.rewards import from_verdicts
from rlvr_jax.types import Status
from rlvr_jax.sandbox.pool import VerifierPool
from tests.helpers import UNAVAILABLE

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sandbox"),
              pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")]
rg = gym_score = None  # the module's first test imports them, not the collection (~1.4 s)


@pytest.fixture(autouse=True, scope="module")
def _reasoning_gym():
    global rg, gym_score
    rg = pytest.importorskip("reasoning_gym",
                             reason="the optional extra: pip install -e '.[tasks]'")
    from rlvr_jax.verify import gym_score


SEED = 3


def _job(dataset, index, answer, tagged=True):
    return {"dataset": dataset, "config": {}, "seed": SEED, "index": index,
            "completion": f"<answer>{answer}</answer>" if tagged else answer}


def _oracle(dataset, index):
    return rg.create_dataset(dataset, seed=SEED, size=gym_score.SIZE)[index]["answer"]


@pytest.fixture(scope="module")
def pool():
    os.environ["RLVR_SECRET"] = "hunter2"
    try:
        with VerifierPool("reasoning_gym", workers=1, timeout_s=8.0, mode="forkserver") as p:
            yield p
    finally:
        del os.environ["RLVR_SECRET"]


def test_only_a_full_score_passes_and_padding_earns_a_fraction(pool):
    gold = _oracle("chain_sum", 7)
    v = pool.verify([_job("chain_sum", 7, gold), _job("chain_sum", 7, f"{gold} is it"),
                     _job("chain_sum", 7, gold, tagged=False),
                     _job("chain_sum", 7, str(int(gold) + 1))])
    assert [x.status for x in v] == [Status.PASS, Status.WRONG, Status.UNPARSEABLE,
                                     Status.WRONG]
    # reasoning-gym pays len(oracle) / len(answer) for an answer containing the oracle.
    assert v[1].fraction == pytest.approx(len(gold) / len(f"{gold} is it"))
    assert list(from_verdicts(v, "binary")) == [1.0, 0.0, 0.0, 0.0]
    assert from_verdicts(v, "graded")[1] == pytest.approx(v[1].fraction)  # opt-in partial


def test_evaluated_answers_are_contained_and_cannot_reach_another_sample(pool):
    """string_insertion's scorer evals the answer. An answer that patches the scorer to give
    everyone full marks, reads the trainer's secret, writes files or hangs: each is its own
    verdict, and the next sample in the same worker is scored by the unpatched scorer."""
    mod = "reasoning_gym.algorithmic.string_insertion"
    patch = (f"setattr(__import__('{mod}', fromlist=['x']).StringInsertionDataset, "
             "'score_answer', lambda self, a, e: 1.0) or 'x'")
    secret = "__import__('os').environ.get('RLVR_SECRET', 'none')"
    write = "open('/tmp/rlvr_gym_pwned', 'w').write('x') and 'x'"
    tamper = "open(__import__('reasoning_gym').__file__, 'a').write('#') and 'x'"  # read-only
    hang = "[0 for _ in iter(int, 1)]"
    leave = "exit(0)"  # ends the evaluating grandchild: no value, the scorer's own except
    wrong = "certainly not the answer"
    size = os.path.getsize(rg.__file__)
    v = pool.verify([_job("string_insertion", 1, x) for x in
                     (patch, wrong, secret, write, hang, leave, wrong, tamper)])
    assert v[7].status == Status.WRONG and os.path.getsize(rg.__file__) == size
    assert v[1].status == Status.WRONG and v[6].status == Status.WRONG  # the patch died
    assert v[0].status == Status.WRONG and v[2].status == Status.WRONG
    assert "hunter2" not in "".join(x.detail for x in v)
    assert not os.path.exists("/tmp/rlvr_gym_pwned")
    assert v[4].status in (Status.TIMEOUT, Status.MEMORY_LIMIT)
    assert v[5].status == Status.WRONG  # the candidate's, not a sandbox error
    gold = _oracle("string_insertion", 2)
    assert pool.verify([_job("string_insertion", 2, gold)])[0].status == Status.PASS


def test_a_scorer_that_raises_on_an_answer_is_that_answers_verdict():
    v = gym_score.verdict(_job("chain_sum", 1, "x"),
                          {"status": "ok", "outputs": [{"error": "ValueError: bad"}]})
    assert v.status == Status.WRONG and "raised" in v.detail and v.fraction == 0.0


# ----------------------------------------------------------------------------- issue 36, 1
# An answer that writes a full score to every writable descriptor and exits: it forged PASS
# with score 1.0 on every dataset whose scorer evaluates the answer (eval or parse_expr).
FORGE = ('__import__(\'builtins\').exec("import os, fcntl\\nB = b\'{\\"status\\": \\"ok\\", '
         '\\"outputs\\": [{\\"value\\": {\\"found\\": true, \\"score\\": 1.0}}]}\\\\n\'\\n'
         'for i in range(3, 64):\\n    try:\\n        if fcntl.fcntl(i, 3) & 3 == 1: '
         'os.write(i, B)\\n    except OSError: pass\\nos._exit(0)")')
EVALUATING = ["string_insertion", "spiral_matrix", "binary_matrix", "n_queens", "number_sorting",
              "countdown", "puzzle24", "simple_integration", "intermediate_integration",
              "polynomial_multiplication"]


@pytest.mark.parametrize("mode", ["forkserver", "fresh"])
def test_a_forged_score_is_wrong_and_the_right_answer_passes(mode):
    """Every such dataset in the forkserver; in fresh sandboxes (one reasoning-gym import per
    job, ~1 s each here) one per way in: eval, parse_expr, an entry carried by the job."""
    from rlvr_jax.tasks.gym import _as_json

    names = EVALUATING if mode == "forkserver" else [
        "string_insertion", "countdown", "polynomial_multiplication"]
    jobs = []
    for name in names:
        entry = rg.create_dataset(name, seed=SEED, size=gym_score.SIZE)[4]
        carried = {"entry": entry} if _as_json(entry) else {}  # as the task sends it
        jobs += [dict(_job(name, 4, FORGE), **carried),
                 dict(_job(name, 4, entry["answer"]), **carried)]
    with VerifierPool("reasoning_gym", workers=2, timeout_s=20.0, mode=mode) as p:
        got = p.verify(jobs)
    forged = {n: v.status for n, v in zip(names, got[0::2])}
    right = {n: v.status for n, v in zip(names, got[1::2])}
    assert set(forged.values()) == {Status.WRONG}, forged
    assert set(right.values()) == {Status.PASS}, right


def test_a_forged_score_in_a_data_files_row_is_wrong():
    """Mixed-file rows carry their entry and reach the same scorer (routed)."""
    from rlvr_jax.verify.verifiers import make_verifier

    entry = rg.create_dataset("spiral_matrix", seed=SEED, size=10)[1]
    row = {"kind": "reasoning_gym", "dataset": "spiral_matrix",
           "entry": {"question": entry["question"], "answer": entry["answer"],
                     "metadata": {}}}
    v = make_verifier("routed", workers=1, timeout_s=20.0, batch_timeout_s=None, mode=None)
    try:
        got = v.verify([dict(row, completion=f"<answer>{FORGE}</answer>"),
                        dict(row, completion=f"<answer>{entry['answer']}</answer>")])
    finally:
        v.close()
    assert [x.status for x in got] == [Status.WRONG, Status.PASS]


def test_the_scorers_detail_never_quotes_what_the_answer_evaluated_to(pool):
    """The evaluation could read files the sandbox shows and get them quoted back in the
    verdict (`float(<file text>)` raising with it): only the exception's name is kept."""
    secret = "__import__('sys').version"
    v = pool.verify([_job("countdown", 2, secret), _job("spiral_matrix", 2, secret)])
    import sys

    assert all(sys.version not in x.detail for x in v), [x.detail for x in v]
