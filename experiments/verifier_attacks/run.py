"""Issue 36's two runs under attack: real training runs whose verification batches carry the
third audit's payloads, through the verifier the run builds itself.

    python experiments/verifier_attacks/run.py gym    [--steps 6] [--out DIR]
    python experiments/verifier_attacks/run.py code   [--steps 6] [--out DIR]
    ... --repo PATH: the same with another checkout's rlvr_jax (e.g. a worktree of the
        commit before the fix), for the before/after table

gym:  `+experiment=gym_mix` with reasoning-gym datasets whose scorers evaluate the answer
      (binary_matrix: eval; countdown: sympy's parse_expr) beside chain_sum. A quarter of each
      batch's completions (every 4th job) is replaced by the forging payload, an answer that
      writes a full score to every writable descriptor and exits (test_gym_score.FORGE): its
      verdicts are counted by status. Before the fix every forged job on those datasets was
      PASS with score 1.0.
code: `+experiment=code_grpo` twice with the same seed: once plain, once with a poisoning job
      (a read-only default ACL and a user attribute on /tmp and /dev/shm, a kernel key:
      test_third_audit.POISON) sent first in every verification batch of the same pool. Both
      arms also send two honest programs in every batch that read stdin (three cases) and
      rewrite files, what the poison broke. The model's verdicts of the two runs are compared
      job by job (identical), and the honest programs' counted (all PASS). Before the fix the
      poisoned arm's honest stdin jobs were RUNTIME_ERROR for the rest of the worker's life.

Shortened for the question (a warm start of 40 steps, `--steps` GRPO steps): accuracy is not
the point, what each job is scored is. Prints a table and writes results.json to --out.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile

import checkout

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from tests.verify.test_gym_score import FORGE  # noqa: E402
from tests.verify.test_third_audit import POISON, _honest_batch  # noqa: E402

VerifierPool = None  # imported in main(), from --repo when given (a baseline checkout)

SHORT = ["warmup.steps=40", "eval.num_problems=16", "eval.sampled_per_problem=1",
         "eval.every_steps=1000", "logger.mode=disabled", "logger.progress_bar=false"]
GYM = ["+experiment=gym_mix", "task.max_prompt_tokens=448", "algo.prompts_per_step=8",
       "sampling.max_new_tokens=40",
       "task.datasets=[{name: chain_sum, config: {min_terms: 2, max_terms: 2, min_digits: 1, "
       "max_digits: 1}}, {name: binary_matrix, config: {min_n: 2, max_n: 2}}, "
       "{name: countdown, config: {min_numbers: 3, max_numbers: 3}}]"]
CODE = ["+experiment=code_grpo"]


def _train(overrides: list[str], run_dir: str) -> None:
    from rlvr_jax import train

    sys.argv = ["train", *overrides, f"hydra.run.dir={run_dir}"]
    try:
        train.main()
    except SystemExit as e:
        if e.code not in (0, None):
            raise


def gym(steps: int, out: str) -> dict:
    real = VerifierPool.verify
    seen = collections.Counter()  # (dataset, forged?, status)

    def verify(self, jobs):
        if self.kind != "reasoning_gym":
            return real(self, jobs)
        jobs = [dict(j, completion=f"<answer>{FORGE}</answer>") if k % 4 == 3 else j
                for k, j in enumerate(jobs)]
        got = real(self, jobs)
        for k, (j, v) in enumerate(zip(jobs, got)):
            seen[(j["dataset"], k % 4 == 3, v.status.name)] += 1
        return got

    VerifierPool.verify = verify
    try:
        _train([*GYM, *SHORT, f"num_steps={steps}"], os.path.join(out, "gym"))
    finally:
        VerifierPool.verify = real
    table = {f"{d} {'forged' if f else 'model'} {s}": n for (d, f, s), n in sorted(seen.items())}
    forged_pass = sum(n for (d, f, s), n in seen.items() if f and s == "PASS")
    print("\n".join(f"{k:45s} {n}" for k, n in table.items()))
    print(f"forged jobs scored PASS: {forged_pass} of "
          f"{sum(n for (d, f, s), n in seen.items() if f)}")
    return {"counts": table, "forged_pass": forged_pass}


def code(steps: int, out: str) -> dict:
    real = VerifierPool.verify
    runs: dict = {}
    for arm in ("plain", "poisoned"):
        record, poison, sentinels = [], [], collections.Counter()

        def verify(self, jobs, arm=arm, record=record, poison=poison, sentinels=sentinels):
            if self.kind != "code":
                return real(self, jobs)
            k = len(poison) + sum(sentinels.values())
            extra = ([{"completion": POISON + f"# {k}", "entry_point": "f", "inputs": [[0]],
                       "expected": [None]}] if arm == "poisoned" else [])
            # Honest programs that read stdin (three cases) and rewrite files, in every batch
            # of both arms: the poisoning job left /tmp read-only for exactly these.
            honest = _honest_batch(k)
            got = real(self, extra + honest + list(jobs))
            if extra:
                poison.append(got[0].detail)
            n = len(extra) + len(honest)
            sentinels.update(v.status.name for v in got[len(extra):n])
            record.extend((j["completion"], v.status.name, v.detail) for j, v in
                          zip(jobs, got[n:]))
            return got[n:]

        VerifierPool.verify = verify
        try:
            _train([*CODE, *SHORT, f"num_steps={steps}"], os.path.join(out, f"code_{arm}"))
        finally:
            VerifierPool.verify = real
        runs[arm] = (record, poison, sentinels)
    plain, _, plain_sentinels = runs["plain"]
    poisoned, poison, sentinels = runs["poisoned"]
    same = plain == poisoned
    statuses = collections.Counter(s for _, s, _ in poisoned)
    print(f"model's jobs: {len(plain)} plain, {len(poisoned)} poisoned; identical: {same}")
    print(f"their statuses (poisoned run): {dict(statuses)}")
    print(f"honest stdin/file jobs: plain run {dict(plain_sentinels)}, "
          f"poisoned run {dict(sentinels)}")
    print(f"the poisoning job's own verdicts: {collections.Counter(poison).most_common(2)}")
    return {"jobs": len(plain), "identical": same, "statuses": dict(statuses),
            "honest_plain": dict(plain_sentinels), "honest_poisoned": dict(sentinels),
            "poison_details": dict(collections.Counter(poison))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("arm", choices=["gym", "code"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", default=None)
    checkout.add_flag(ap)
    a = ap.parse_args()
    global VerifierPool
    checkout.use(a.repo)
    try:
        import rlvr_jax.verify  # noqa: F401 - registers the graders' kinds
        from rlvr_jax.sandbox.pool import VerifierPool
    except ImportError:  # a checkout from before the sandbox package (rlvr_jax/sandbox/)
        from rlvr_jax.verify.pool import VerifierPool
    out = a.out or tempfile.mkdtemp(prefix="rlvr-attacks-")
    result = (gym if a.arm == "gym" else code)(a.steps, out)
    with open(os.path.join(out, f"results_{a.arm}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"written: {out}/results_{a.arm}.json")


if __name__ == "__main__":
    main()
