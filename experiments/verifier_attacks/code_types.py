"""Return values whose types differ from the expected ones, through the code verifier's pool.

Python's `==` tells `[4, 5]` from `(4, 5)` and `{'1': 2}` from `{1: 2}`; a verifier that moves
values as plain JSON does not. For each expected value, the candidate returns variants: the
containers swapped (tuple <-> list, at each level), int keys written as strings, a dict with
a key both as int and as string, and the honest value itself; and an honest function that
returns `repr` of its argument, called with each value. Each runs as an MBPP literal
assert (compared on the host) and as a non-literal one (the dataset's test replayed in the
sandbox). The truth is Python's `==`. Prints wrong passes and honest failures per family.

    python experiments/verifier_attacks/code_types.py
    cd PATH && python .../code_types.py --repo PATH: the same with another checkout's rlvr_jax
"""

from __future__ import annotations

import argparse
import collections
import os
import time

import checkout

WANTS = [(4, 5), [4, 5], [(1, 2), (3, 4)], ((1, [2, 3]),), {1: 2, 3: 4}, {1: (2, 3)},
         {"a": [1, (2,)]}, {4, 5}, frozenset({1, 2}), b"ab", 1 + 2j, [{1: "x"}], ("a",),
         {(1, 2): "p"}, [[1], [2, 3]], {2: [1.5, 2.5]}]


def swaps(value):
    """Variants with one container's type swapped (tuple <-> list), at every position."""
    if isinstance(value, (list, tuple)):
        yield (tuple if isinstance(value, list) else list)(value)
        for i, item in enumerate(value):
            for variant in swaps(item):
                out = list(value)
                out[i] = variant
                yield type(value)(out)
    elif isinstance(value, dict):
        for k, item in value.items():
            for variant in swaps(item):
                yield {**value, k: variant}


def str_keys(value):
    if isinstance(value, dict) and any(not isinstance(k, str) for k in value):
        yield {str(k): v for k, v in value.items()}
        k = next(k for k in value if not isinstance(k, str))
        yield {k: "wrong", **{str(key): v for key, v in value.items()}}  # both, last wins


def cases():
    """(family, candidate's value, expected value)."""
    for want in WANTS:
        yield "honest value", want, want
        for variant in swaps(want):
            yield "containers swapped", variant, want
        for variant in str_keys(want):
            yield "keys as strings", variant, want


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    checkout.add_flag(ap)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    checkout.use(a.repo)
    import rlvr_jax
    import rlvr_jax.verify  # noqa: F401 - registers the graders' kinds
    from rlvr_jax.data.code_tests import tests_of
    from rlvr_jax.sandbox.pool import VerifierPool

    jobs, keys, rows_refused = [], [], collections.Counter()
    calls = [(family, f"return {got!r}", f"return {want!r}", "0", want, got == want)
             for family, got, want in cases()]
    calls += [("arguments as given", "return repr(x)", "return repr(x)", repr(arg), repr(arg),
               True) for arg in WANTS]
    for family, body, reference, arg, want, truth in calls:
        for form, test in (("literal", f"assert f({arg}) == {want!r}"),
                           ("replayed", f"assert f({arg}) == {want!r} and True")):
            spec = {"test_list": [test], "code": f"def f(x):\n    {reference}"}
            try:
                fields = tests_of(spec, "row")
            except ValueError:  # the checkout cannot make this row at all
                rows_refused[form] += 1
                continue
            jobs.append(dict(fields, completion=f"def f(x):\n    {body}"))
            keys.append((family, form, truth))
    t0 = time.perf_counter()
    with VerifierPool("code", workers=a.workers, timeout_s=30.0) as pool:
        verdicts = pool.verify(jobs)
    took = time.perf_counter() - t0
    table = collections.defaultdict(lambda: [0, 0, 0])  # jobs, wrong passes, honest failures
    for (family, form, truth), v in zip(keys, verdicts):  # truth: Python's ==
        passed = v.status.name == "PASS"
        row = table[family, form]
        row[0] += 1
        row[1] += passed and not truth
        row[2] += truth and not passed
    print(f"rlvr_jax: {os.path.dirname(rlvr_jax.__file__)}")
    print("| family | test | jobs | wrong passes | honest failures |\n|---|---|---|---|---|")
    for (family, form), (n, bad, missed) in sorted(table.items()):
        print(f"| {family} | {form} | {n} | {bad} | {missed} |")
    total = [sum(r[i] for r in table.values()) for i in range(3)]
    print(f"| all | | {total[0]} | {total[1]} | {total[2]} |")
    print(f"rows the checkout could not make: {dict(rows_refused) or 0}; {len(jobs)} jobs in "
          f"{took:.1f} s")


if __name__ == "__main__":
    main()
