"""The stash task (a value kept in a Python session): answers against Python's own pow,
held-out problems never in training, and its two-call warm-start episode laid out as calls
(trained), observations (not trained) and the answer."""

import numpy as np

from rlvr_jax import warmstart
from rlvr_jax.envs.calls import CALL_FORMATS
from rlvr_jax.episodes import Glue
from rlvr_jax.tasks.stash import StashTask
from rlvr_jax.tokenizer import load_tokenizer, save_char_tokenizer


def test_answers_splits_and_the_two_call_demonstration(tmp_path):
    task = StashTask()
    train = task.train_batch(0, 0, 64)
    held = task.heldout_set(32)
    assert not {task.prompt(p) for p in train} & {task.prompt(p) for p in held}
    for p in train[:8]:
        assert p.answer == (p.base ** p.exponent) % p.modulus
        assert task.verify_jobs([p], [str(p.answer)]) == [{"completion": str(p.answer),
                                                             "answer": p.answer}]
    save_char_tokenizer(str(tmp_path))
    tok = load_tokenizer(str(tmp_path))
    tag = CALL_FORMATS["tag"]
    tools = warmstart.ToolDemos(tag.render, Glue.of(tok, "<r>", "</r>"), 12, 1.0)
    p = train[0]
    ids, trained = warmstart._tool_demonstration(task, p, tools, tok, np.random.default_rng(0))
    text = tok.decode(ids, skip_special_tokens=True)
    want = (f"<python>x={p.base}**{p.exponent}</python><r></r><python>x%{p.modulus}</python>"
            f"<r>{p.answer}</r>{p.answer}")
    assert text == want
    observed = "".join(tok.decode([i]) for i, t in zip(ids, trained) if t == 0)
    assert observed == f"<r></r><r>{p.answer}</r>"
