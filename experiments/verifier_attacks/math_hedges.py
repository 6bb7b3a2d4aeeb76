"""Hedged math answers through the math verifier's worker pool (the path a run's rewards take).

A hedge `a <joiner> b` states two values; no grader should pass it for either. Each hedge is
judged against a and against b; honest forms of the same values must still pass. Prints the
passes per joiner family and the totals.

    python experiments/verifier_attacks/math_hedges.py
    cd PATH && python .../math_hedges.py --repo PATH: the same with another checkout's rlvr_jax
    (a worktree of the commit before the fix); run from there, since the pool's workers
    (`python -m`) import the rlvr_jax of the working directory first
"""

from __future__ import annotations

import argparse
import os
import time

import checkout

PAIRS = [("5", "6"), ("6", "5"), ("\\frac{1}{2}", "3"), ("x=2", "x=3"), ("12", "7"), ("0", "1"),
         ("\\sqrt{2}", "\\sqrt{3}"), ("\\{1, 2\\}", "\\{3\\}"), ("x^2", "x^3")]
# Joiners by family: what math-verify's reader did with each before the whole-answer rule.
JOINERS = {
    "spacing / line breaks": [" ", "~", "\\\\", " \\\\ ", "\\quad ", "\\qquad ", "\\hspace{1em}",
                              "\\enspace ", "\\ ", "\\,", "\\;", "\\!", "\\:", "\\newline ",
                              "\\cr ", "\\linebreak ", "\\\\[2pt]", "\\hfill ", "\\bigskip "],
    "words and logic": [" \\lor ", " \\vee ", " \\land ", " \\wedge ", " \\text{ or } ",
                        "\\text{or}", "\\text{, }", "\\text{ and }", "\\mbox{ or }", " or ",
                        " and ", "\\textrm{ or }", "\\mathrm{ or }", "\\operatorname{or}",
                        "\\;\\text{or}\\;", "\\quad\\text{or}\\quad "],
    "relations": [" \\to ", " \\rightarrow ", " \\Rightarrow ", " \\implies ", " \\iff ",
                  " \\equiv ", " \\approx ", " = ", " \\neq ", " \\mid ", " \\vert ", "|"],
    "markup": ["\\left.\\right.", "\\phantom{x}", "{}", "\\tag{1}", "\\label{a}", "\\cancel{7}",
               "\\underbrace{}", "\\color{red}", "\\textcolor{red}{ }", "&", " \\& ",
               "\\displaystyle ", "$ or $", "\\vbox{}", "\\hfill "],
    "operators read as one side": ["\\lor", "\\vee", "\\sqcup", "\\cup", "\\oplus", "\\pm",
                                   "\\mp", " / ", " \\slash ", "\\ldots ", "\\cdots "],
    # templates: @a and @b are the two values (the second inside markup or text)
    "inside or around text": ["@a\\text{ or @b}", "@a\\mbox{ (or @b)}", "@a\\mathrm{ or @b}",
                              "@a \\text{ i.e. } @b", "@a \\text{, not } @b", "@a\\,(@b)",
                              "@a\\phantom{@b}", "@a\\vbox{@b}", "@a\\textnormal{ or $@b$}",
                              "@a\\text{\\,or\\,}@b", "@a \\text{ = } @b",
                              "\\text{@a hours or @b hours}", "\\text{@a or @b}",
                              "\\text{@a hours} @b", "\\mbox{@a kg, @b kg}"],
}
# A joiner's hedge: a <joiner> b, or the template filled in


def hedge(joiner: str, a: str, b: str) -> str:
    return joiner.replace("@a", a).replace("@b", b) if "@b" in joiner else a + joiner + b
HONEST = [("1000", "1\\,000"), ("1000", "1 000"), ("12345678", "12 345 678"), ("18", "18."),
          ("5", "5^\\circ"), ("5", "\\$5"), ("5", "5\\text{ cm}"), ("\\frac{11}{2}",
          "5 \\frac{1}{2}"), ("5", "x=5"), ("5", "2+3=5"), ("y=2x+3", "y = 2x+3"),
          ("50", "50\\%"), ("1, 2", "1 \\text{ and } 2"), ("(1,2)", "\\left( 1, 2 \\right)"),
          ("3.14", "x \\approx 3.14"), ("\\frac{22}{7}", "\\frac{22}{7} \\approx 3.14"),
          ("(-\\infty, 3]", "(-\\infty, 3]"), ("\\frac{1}{2}", "\\dfrac{1}{2}"),
          ("\\{1,2\\}", "\\{2,1\\}"), ("2\\sqrt{3}", "2\\sqrt{3}"), ("1000", "1,000"),
          ("2", "\\text{2 hours}"), ("0.5", "0.5\\text{ kg}")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    checkout.add_flag(ap)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    checkout.use(a.repo)
    import rlvr_jax
    from rlvr_jax.sandbox.pool import VerifierPool
    from rlvr_jax.types import Status

    jobs, keys = [], []
    for family, joiners in JOINERS.items():
        for joiner in joiners:
            for x, y in PAIRS:
                if x == "0" and joiner.strip() in ("/", "\\slash"):
                    continue  # 0 / 1 is 0: a quotient, no hedge
                for gold in (x, y):
                    jobs.append({"gold": gold, "completion": f"\\boxed{{{hedge(joiner, x, y)}}}"})
                    keys.append(family)
    honest = [{"gold": g, "completion": f"\\boxed{{{p}}}"} for g, p in HONEST]
    t0 = time.perf_counter()
    with VerifierPool("math", workers=a.workers) as pool:
        got = pool.verify(jobs + honest)
    wall = time.perf_counter() - t0
    print(f"rlvr_jax from {os.path.dirname(os.path.dirname(rlvr_jax.__file__))}")
    print("| joiners | hedges judged | passed |\n|---|---|---|")
    for family in JOINERS:
        rows = [v for v, k in zip(got, keys) if k == family]
        print(f"| {family} | {len(rows)} | {sum(v.status == Status.PASS for v in rows)} |")
    hedged = got[: len(jobs)]
    print(f"| **all** | {len(hedged)} | **{sum(v.status == Status.PASS for v in hedged)}** |")
    kept = sum(v.status == Status.PASS for v in got[len(jobs):])
    print(f"\nhonest forms passed: {kept} of {len(honest)}; "
          f"{len(jobs) + len(honest)} verdicts in {wall:.1f} s ({a.workers} workers)")
    for (g, p), v in zip(HONEST, got[len(jobs):]):
        if v.status != Status.PASS:
            print(f"  honest {p!r} for {g!r}: {v.status.name} ({v.detail})")


if __name__ == "__main__":
    main()
