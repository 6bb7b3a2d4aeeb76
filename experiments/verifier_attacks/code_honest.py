"""Honest code completions through the code verifier's sandbox pool: one right solution written
the ways models write it (a tagged or bare block, `Python` / `python3` info strings, prose
around it, example calls or example input after it). Each must PASS; prints the misses.

    python experiments/verifier_attacks/code_honest.py [--repo PATH]   (see math_hedges.py;
    needs bubblewrap)
"""

from __future__ import annotations

import argparse

import checkout

CALL = "def f(x):\n    return x + 1\n"
STDIN = "print(int(input()) + 1)\n"
# (name, completion template: {code} is the solution)
FORMS = [
    ("tagged", "```python\n{code}```"),
    ("bare", "```\n{code}```"),
    ("prose around", "Here is my solution:\n```python\n{code}```\nIt adds one."),
    ("Python", "```Python\n{code}```"),
    ("python3", "```python3\n{code}```"),
    ("py", "```py\n{code}```"),
    ("spaces after the info string", "```python  \n{code}```"),
    ("no block", "{code}"),
    ("example calls after", "```python\n{code}```\nFor example:\n```python\nprint(f(3))\n```"),
    ("example input after", "```python\n{code}```\nExample input:\n```\n3\n```\nOutput: 4"),
    ("shell block after", "```python\n{code}```\nRun it with:\n```bash\npython main.py\n```"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    checkout.add_flag(ap)
    a = ap.parse_args()
    checkout.use(a.repo)
    from rlvr_jax.sandbox.pool import VerifierPool
    from rlvr_jax.types import Status

    jobs, names = [], []
    for name, form in FORMS:
        jobs.append({"completion": form.format(code=CALL), "entry_point": "f",
                     "inputs": [[1], [41]], "expected": [2, 42]})
        names.append(f"{name} (function)")
        if "f(3)" not in form:  # calls of f: a function task's form only
            jobs.append({"completion": form.format(code=STDIN), "stdin": ["3\n", "41\n"],
                         "expected_stdout": ["4\n", "42\n"]})
            names.append(f"{name} (stdin)")
    with VerifierPool("code", workers=2) as pool:
        got = pool.verify(jobs)
    for name, v in zip(names, got):
        if v.status != Status.PASS:
            print(f"  {name}: {v.status.name} ({v.detail[:70]})")
    print(f"honest forms passing: {sum(v.status == Status.PASS for v in got)} of {len(got)}")


if __name__ == "__main__":
    main()
