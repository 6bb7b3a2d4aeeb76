"""Honest math answers through the math verifier's worker pool: every gold answer of a MATH-style
list boxed as itself, and the forms models write for a gold (`\\text{2 hours}` for 2, `1, 2, 3`
for `\\{1,2,3\\}`, `\\varnothing` for `\\emptyset`). The counterpart of math_hedges.py: the
stricter rules must not fail these. Prints the misses and the totals.

    python experiments/verifier_attacks/math_honest.py [--repo PATH]   (see math_hedges.py)
"""

from __future__ import annotations

import argparse

import checkout

GOLDS = [r"\frac{\sqrt{3}}{2}", r"(-\infty,-2)\cup(3,\infty)", r"\text{(C)}", r"2\sqrt{2}",
         r"\dfrac{3}{4}", "x^2+2x+1", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"10\%", r"45^\circ",
         r"\$18.90", r"1,\!000", r"\pi", r"2\pi", r"\frac{\pi}{4}", "[-2, 5]", r"\{1,2,3\}", "3, 5",
         "-1, 2", "y = -2x + 3", r"\text{odd}", r"\text{Monday}", r"5\sqrt{5}", r"4\sqrt{3} - 2",
         r"\infty", "0", r"-\frac{1}{2}", "(2,-1)", r"\left( \frac{1}{2}, 3 \right)", "1.5",
         r"\frac{7}{2}", r"3 \text{ cm}^2", r"60^\circ", r"17.5\%", "a^2b", r"\sqrt[3]{2}", "e^2",
         r"\log 2", r"\ln 3", "2^{10}", "10!", r"\binom{10}{3}", r"\text{A, C}", "(1,2,3)",
         r"\mathbf{(B)}", "-3,-1,1,3", "6 - 2i", "2+3i", r"\frac{1+\sqrt{5}}{2}",
         r"\frac{3}{2}\text{ inches}", r"12\text{ square units}", r"2\frac{1}{4}",
         r"0.\overline{36}", r"4.5\text{ hours}", r"\$2.50", r"90^{\circ}", r"\frac{9}{4}\pi",
         r"\sqrt{13}", r"-2 \le x \le 3", "x=1", "x = 5, y = 3", "(0,1]", r"\emptyset",
         r"\text{no solution}", r"\frac{1}{6}", "1/6", r"\tfrac{1}{6}", r"5.\overline{3}", "0.5",
         "-0.5", r"\frac{-1}{2}", "1000000", "1{,}000", r"2 \cdot 3^4", r"\mbox{(E)}",
         r"\textbf{(D) }12", "A", r"\text{Devon}", r"\pm 2", "x^3-3x^2+3x-1", r"\frac{a+b}{2}",
         r"\cos 2x", r"\sin^2 x", r"8\text{ cm}", r"\$1.50", r"3\frac{1}{2}\text{ feet}",
         r"\frac{1}{2}\text{ mile}", r"1.08\times 10^{5}", r"6.02 \times 10^{23}", "10^{-3}", "2:3",
         r"\frac{3\sqrt{2}}{4}", r"\sqrt{2}+\sqrt{3}", r"(-1,1)\cup(2,\infty)", r"\{-1, 1\}", "p=3",
         r"\angle A", "25", r"\text{25 cents}", "0.25", r"\text{1 hour}", r"\text{2.5 hours}",
         r"18 \text{ dollars}", r"70 \text{ mph}", r"\frac{1}{4}\%", r"-\infty", r"\text{(A)}\ 5",
         r"1 \frac{1}{2}", "k=2", "f(x)=2x"]
VARIANTS = [(r"\frac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}"), (r"10\%", "10"), (r"45^\circ", "45"),
            (r"\$18.90", "18.9"), (r"\$18.90", r"\$18.90"), (r"2\sqrt{2}", r"\sqrt{8}"),
            (r"\text{(C)}", "C"), (r"\text{(C)}", "(C)"), (r"\text{Monday}", "Monday"),
            (r"\text{Monday}", r"\text{monday}"), ("3, 5", "5, 3"), ("y = -2x + 3", "y=3-2x"),
            (r"1,\!000", "1000"), (r"1,\!000", "1,000"), ("0.5", r"\frac{1}{2}"),
            (r"\frac{1}{2}", "0.5"), (r"\dfrac{3}{4}", "0.75"), (r"\pi", r"\pi"),
            (r"\frac{\pi}{4}", r"\pi/4"), ("[-2, 5]", "[-2,5]"), (r"\{1,2,3\}", "1, 2, 3"),
            (r"\{1,2,3\}", r"\{3,2,1\}"), ("x^2+2x+1", "(x+1)^2"),
            (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{bmatrix} 1 \\ 2 \end{bmatrix}"),
            (r"60^\circ", r"60^{\circ}"), (r"60^\circ", "60°"), (r"17.5\%", "17.5"),
            ("2+3i", "3i+2"), (r"2\frac{1}{4}", r"\frac{9}{4}"), (r"2\frac{1}{4}", "2.25"),
            (r"0.\overline{36}", r"\frac{4}{11}"), (r"4.5\text{ hours}", "4.5"),
            (r"\$2.50", "2.50"), (r"\$2.50", "2.5"), ("x=1", "1"), ("1", "x=1"),
            (r"\emptyset", r"\varnothing"), (r"\text{no solution}", r"\text{No solution}"),
            ("1/6", r"\frac{1}{6}"), ("1000000", "10^6"), ("1000000", "1{,}000{,}000"),
            (r"\pm 2", "2, -2"), (r"\pm 2", "-2, 2"), (r"8\text{ cm}", r"8\,\text{cm}"),
            (r"8\text{ cm}", "8 cm"), (r"1.08\times 10^{5}", "108000"), ("2:3", r"\frac{2}{3}"),
            ("2:3", "2:3"), (r"\{-1, 1\}", r"\pm 1"), ("25", r"\text{25 cents}"),
            ("25", r"25\text{ cents}"), ("0.25", r"\frac{1}{4}"), (r"\text{(A)}\ 5", "5"),
            (r"1 \frac{1}{2}", "1.5"), ("k=2", "2"), ("f(x)=2x", "2x"), ("18", "18 dollars"),
            ("18", r"\$18"), ("18", r"18\,\text{dollars}"), ("18", r"\text{\$18.00}"),
            ("3", r"\text{three}"), ("12", r"12\text{ square units}"),
            ("12", r"12 \text{ units}^2"), ("6", r"6\text{ ways}"), ("6", r"\mathrm{6\ ways}"),
            ("6", r"\text{6 ways}"), ("6", r"\textbf{6}"), ("6", r"\boxed{6}"), ("5", "5."),
            ("5", "5.0"), ("5", "5.00"), ("-4", "-4"), ("-4", "- 4"), ("-4", "−4"),
            ("10", r"10\text{ people}"), ("10", r"\text{10 people.}"),
            ("1", r"1 \text{ (only one)}"), ("100", r"100\ \text{m}"),
            ("2", r"\text{2}\text{ hours}"), ("2", r"2 \text{hours}"), ("7", r"7 \text{ days}"),
            ("2, -2", "x=2, x=-2"), (r"\pm 2", "x_1 = 2, x_2 = -2"),
            ("2, -2", r"x = 2 \text{ or } x = -2")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    checkout.add_flag(ap)
    a = ap.parse_args()
    checkout.use(a.repo)
    from rlvr_jax.sandbox.pool import VerifierPool
    from rlvr_jax.types import Status

    pairs = [(g, g) for g in GOLDS] + VARIANTS
    with VerifierPool("math", workers=2) as pool:
        got = pool.verify([{"gold": g, "completion": "\\boxed{" + p + "}"} for g, p in pairs])
    for (g, p), v in zip(pairs, got):
        if v.status != Status.PASS:
            print(f"  {p!r} for {g!r}: {v.status.name} ({v.detail[-60:]})")
    own = sum(v.status == Status.PASS for v in got[:len(GOLDS)])
    forms = sum(v.status == Status.PASS for v in got[len(GOLDS):])
    print(f"golds passing as themselves: {own} of {len(GOLDS)}; "
          f"written forms passing: {forms} of {len(VARIANTS)}")


if __name__ == "__main__":
    main()
