"""Held-out evaluation of a policy: n samples per problem (greedy or sampled), in fixed-shape
batches, scored by the task's verifier, summarised as accuracy, pass@k / mean@k / maj@k and
status counts, overall and per data source.

The last batch is padded by repeating its first prompt, so evaluation compiles the sampler once
per mode; padded rows are dropped before scoring.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Callable, Optional, Sequence

import jax
import numpy as np

from rlvr_jax import batching, distributed, pass_at_k, rewards
from rlvr_jax.generate import overrule
from rlvr_jax.tasks.base import Task, tool_contexts
from rlvr_jax.types import Status
from rlvr_jax.verify.verifiers import Verifier


def sample_and_verify(generate: Callable, params, task: Task, tokenizer, problems: Sequence,
                      verifier: Verifier, *, samples_per_problem: int, prompt_len: int,
                      batch_size: int, key: jax.Array, put: Callable,
                      score: Optional[Callable] = None,
                      on_batch: Callable[[int, int], None] = lambda done, total: None):
    """(verdicts, completions, scores), in problem-major order (n per problem); `scores` are
    `score(prompt_B_L, pmask_B_L, tokens_B_R, mask_B_R) -> r_B` of a reward model, or None.
    `generate` (generate.py) gives every row's texts; `on_batch(done, total)` after each
    batch (sequences).
    Over several processes each verifies its block of every batch and the verdicts are
    gathered."""
    jobs = [p for p in problems for _ in range(samples_per_problem)]
    if getattr(generate, "any_batch", False):  # continuous batching: every sequence at once
        procs = jax.process_count()  # (padded so each process verifies an equal block)
        batch_size = -(-len(jobs) // procs) * procs
    verdicts, texts, scores = [], [], []
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start: start + batch_size]
        padded = chunk + [chunk[0]] * (batch_size - len(chunk))
        prompt, mask = batching.encode_prompts(tokenizer, [task.prompt(p) for p in padded],
                                               prompt_len)
        g = generate(params, prompt, mask, key,  # every row's texts
                     tool_contexts(task, padded), np.arange(start, start + batch_size))
        tokens, resp_mask = g.rollout.tokens_B_R, g.rollout.mask_B_R
        batch_texts = g.texts
        mine = distributed.my_rows(batch_size)  # the padding rows too: equal blocks
        batch_verdicts, _ = distributed.gather_verdicts(overrule(
            verifier.verify(task.verify_jobs(padded[mine], batch_texts[mine])), g.verdicts[mine]))
        verdicts += batch_verdicts[: len(chunk)]
        texts += batch_texts[: len(chunk)]
        if score is not None:
            scores += list(score(prompt, mask, tokens, resp_mask)[: len(chunk)])
        on_batch(len(verdicts), len(jobs))
    return verdicts, texts, (np.asarray(scores) if score is not None else None)


def report(problems: Sequence, verdicts: Sequence, texts: Sequence[str], n: int,
           answer_of: Optional[Callable[[str], str | None]],
           ks: Sequence[int] = (1,)) -> dict:
    """accuracy (mean over all samples), pass@k/mean@k/maj@k for k <= n, status counts; the
    same per data source (`problem.data_source`, when problems have one) under `by_source`."""
    correct = np.array([v.status == Status.PASS for v in verdicts]).reshape(len(problems), n)
    answers = None if answer_of is None else [[answer_of(t) for t in texts[i * n:(i + 1) * n]]
                                              for i in range(len(problems))]
    out = {"accuracy": float(correct.mean()), **pass_at_k.summarize(correct, answers, ks),
           **rewards.status_counts(verdicts)}
    sources = defaultdict(list)
    for i, p in enumerate(problems):
        sources[getattr(p, "data_source", None)].append(i)
    if len(sources) > 1 or None not in sources:
        out["by_source"] = {
            str(src): {"problems": len(idx), "accuracy": float(correct[idx].mean()),
                       **pass_at_k.summarize(correct[idx], None if answers is None else
                                             [answers[i] for i in idx], ks),
                       **rewards.status_counts([verdicts[i * n + j] for i in idx
                                                for j in range(n)])}
            for src, idx in sources.items()}
    return out


def held_out(generate_greedy: Callable, generate_sampled: Callable, params, task: Task, tokenizer,
             verifier: Verifier, *, num_problems: int, sampled_per_problem: int,
             sequences_per_batch: int, prompt_len: int, put: Callable, key: jax.Array,
             score: Optional[Callable] = None, say: Callable[[str], None] = lambda text: None,
             label: str = "") -> dict:
    """Greedy and sampled (T=1) held-out accuracy, with pass@k / mean@k / maj@k for k up to
    `sampled_per_problem` and status counts: what the loop logs before, during and after RL.
    With a reward model's `score` (see sample_and_verify), also its mean score of the greedy
    and the sampled responses (`*_learned_reward`): the proxy beside the gold accuracy.
    `say` gets a progress line (`label`: which evaluation) after each batch of a long one."""
    problems = task.heldout_set(num_problems)
    common = dict(prompt_len=prompt_len, batch_size=sequences_per_batch, put=put, key=key,
                  score=score)
    n = sampled_per_problem
    ks = sorted({1, n} | {k for k in (2, 4, 8, 16) if k < n})
    total = len(problems) * (1 + n)
    started = time.perf_counter()

    def progress(before: int):
        def on_batch(done: int, _):
            if before + done < total:  # the last batch's line is the result itself
                say(f"evaluating{label}: {before + done}/{total} sequences "
                    f"({time.perf_counter() - started:.0f}s)")
        return on_batch

    v, texts, greedy_r = sample_and_verify(generate_greedy, params, task, tokenizer, problems,
                                           verifier, samples_per_problem=1,
                                           on_batch=progress(0), **common)
    greedy = report(problems, v, texts, 1, task.answer_of)
    v, texts, sampled_r = sample_and_verify(generate_sampled, params, task, tokenizer, problems,
                                            verifier, samples_per_problem=n,
                                            on_batch=progress(len(problems)), **common)
    sampled = report(problems, v, texts, n, task.answer_of, ks)
    learned = {} if score is None else {"greedy_learned_reward": float(greedy_r.mean()),
                                        "sampled_learned_reward": float(sampled_r.mean())}
    per_source = {f"{mode}_source/{src}/{k}": val
                  for mode, r in (("greedy", greedy), ("sampled", sampled))
                  for src, row in r.get("by_source", {}).items()
                  for k, val in row.items() if k == "accuracy" or "@" in k}
    return {"greedy_accuracy": greedy["accuracy"], "sampled_accuracy": sampled["accuracy"],
            **learned, **per_source,
            **{f"sampled_{k}": val for k, val in sampled.items() if k != "by_source"}}
