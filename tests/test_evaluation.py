"""evaluation.py directly, with a scripted sampler: padded rows of the last batch are dropped
before scoring, verdicts stay in problem-major order, and the report's accuracy, pass@k and
per-source split are the hand-counted ones."""

from types import SimpleNamespace

import jax
import numpy as np

from rlvr_jax import evaluation, generate
from rlvr_jax.tasks.arithmetic import ArithmeticTask, calculate
from rlvr_jax.tokenizer import load_tokenizer, save_char_tokenizer
from rlvr_jax.types import Rollout, Status, Verdict
from rlvr_jax.verify.trusted import TrustedVerifier, check_integer


def test_sample_and_verify_drops_the_padding_and_keeps_the_order(tmp_path):
    save_char_tokenizer(str(tmp_path))
    tok = load_tokenizer(str(tmp_path))
    task = ArithmeticTask()
    problems = task.heldout_set(5)
    seen = []

    def sample(params, prompt, mask, key, rows=None):
        """Answers each prompt right on even calls' rows, off by one on odd rows."""
        texts = tok.batch_decode(np.asarray(prompt), skip_special_tokens=True)
        seen.append(len(texts))
        answers = [str(calculate(t.rstrip("=")) + (i % 2)) for i, t in enumerate(texts)]
        ids = [tok.encode(a, add_special_tokens=False) + [tok.eos_token_id] for a in answers]
        tokens = np.zeros((len(ids), 6), np.int32)
        m = np.zeros((len(ids), 6), np.float32)
        for r, row in enumerate(ids):
            tokens[r, :len(row)], m[r, :len(row)] = row, 1
        return Rollout(tokens, np.zeros_like(m), m, m)

    progress = []
    verdicts, texts, scores = evaluation.sample_and_verify(
        generate.single_turn(sample, tok, lambda x: x, every_row=True), None, task, tok,
        problems, TrustedVerifier(check_integer),
        samples_per_problem=2, prompt_len=8, batch_size=4, key=jax.random.key(0),
        put=lambda x: x, on_batch=lambda done, total: progress.append((done, total)))
    assert seen == [4, 4, 4]  # 10 samples in batches of 4: the last one padded
    assert progress == [(4, 10), (8, 10), (10, 10)]  # what an evaluation's progress lines say
    lines = []
    gen = generate.single_turn(sample, tok, lambda x: x, every_row=True)
    evaluation.held_out(gen, gen, None, task, tok, TrustedVerifier(check_integer),
                        num_problems=5, sampled_per_problem=2, sequences_per_batch=4,
                        prompt_len=8, put=lambda x: x, key=jax.random.key(0), say=lines.append,
                        label=" before RL")
    assert [line.split(" (")[0] for line in lines] == [  # every batch but the last
        f"evaluating before RL: {k}/15 sequences" for k in (4, 5, 9, 13)]
    assert len(verdicts) == len(texts) == 10 and scores is None
    # Rows alternate right/wrong within each batch of 4: samples 0, 2, 4, ... are right.
    assert [v.status for v in verdicts] == [Status.PASS, Status.WRONG] * 5
    assert texts[0] == str(problems[0].answer)


def test_report_counts_by_hand():
    problems = [SimpleNamespace(data_source="a"), SimpleNamespace(data_source="a"),
                SimpleNamespace(data_source="b")]
    ok, bad = Verdict(Status.PASS), Verdict(Status.WRONG)
    verdicts = [ok, bad, bad, bad, ok, ok]  # n = 2 per problem
    out = evaluation.report(problems, verdicts, ["1", "2", "3", "3", "4", "4"], 2,
                            lambda t: t, ks=(1, 2))
    assert out["accuracy"] == 0.5
    assert out["pass@2"] == 2 / 3  # problems 0 and 2 have a correct sample
    assert out["by_source"]["a"]["accuracy"] == 0.25
    assert out["by_source"]["b"]["accuracy"] == 1.0 and out["by_source"]["b"]["problems"] == 1
