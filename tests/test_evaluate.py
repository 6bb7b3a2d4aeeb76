"""The evaluation command's arguments (rlvr_jax/evaluate.py; whole evaluations:
tests/test_loop.py, tests/test_end_to_end.py): a k it cannot estimate, or a step that is not
there, is one line saying what is possible."""

import pytest

from rlvr_jax import evaluate
from rlvr_jax.checkpoint import CheckpointError, read_params


@pytest.mark.parametrize("argv,message", [
    (["run", "--n", "2", "--k", "1,4"], "--k 4: each k must be in 1..--n (2)"),
    (["run", "--k", "a"], "comma-separated integers"),
    (["run", "--n", "-1"], "--n -1: must be >= 0"),
])
def test_impossible_k_is_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        evaluate.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_the_default_ks_are_those_n_allows():
    import argparse

    ap = argparse.ArgumentParser()
    assert evaluate._ks(ap, None, 4) == [1, 2, 4]
    assert evaluate._ks(ap, None, 6) == [1, 2, 4]
    assert evaluate._ks(ap, None, 1) == [1]


def test_a_missing_step_names_the_steps_there(tmp_path):
    for step in (10, 20, 30):
        (tmp_path / "checkpoints" / str(step)).mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"no checkpoint of step 7 .*its steps: 10, 20, 30"):
        read_params(str(tmp_path), 7)
