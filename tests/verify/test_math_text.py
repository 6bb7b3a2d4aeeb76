"""How a math answer is written (rlvr_jax/verify/math_text.py): the rewrites before the parser,
the items an answer may list, the last box. The verdicts they lead to are in test_math.py."""

import pytest

from rlvr_jax.verify import math_text


@pytest.mark.parametrize("answer,written", [
    ("\\text{2 hours}", "2\\text{ hours}"), ("\\mathrm{6\\ ways}", "6\\text{ ways}"),
    ("\\text{\\$18.00}", "\\$18.00"), ("18 dollars", "18\\text{ dollars}"),
    ("60 km per hour", "60\\text{ km per hour}"), ("\\boxed{\\boxed{6}}", "6"),
    ("\\varnothing", "\\emptyset "), ("x=2, x=-2", "2, -2"), ("x_1 = 2, x_{2}=-2", "2, -2"),
    ("x=2, y=3", "x=2, y=3"),
    # left as they are: a second value, a joining word, a word the parser reads as maths
    ("\\text{2 or 3}", "\\text{2 or 3}"),
    ("\\text{2 hours or 3 hours}", "\\text{2 hours or 3 hours}"),
    ("5 pi", "5 pi"), ("2 xy", "2 xy"), ("\\boxed{12} 7", "\\boxed{12} 7"),
])
def test_what_is_rewritten(answer, written):
    assert math_text.as_written(answer) == written


@pytest.mark.parametrize("gold,items", [("5", 1), ("1, 2", 2), ("(1, 2)", 1), ("\\{1,2,3\\}", 3),
                                        ("\\left\\{1, 2\\right\\}", 2), ("\\pm 2", 2),
                                        ("1,\\!000", 1), ("x=5, y=3", 2)])
def test_items_an_answer_may_list(gold, items):
    assert math_text.items_allowed(gold) == items


def test_the_last_box_and_its_groups():
    assert math_text.last_box("\\fbox{1} then \\boxed{\\frac{1}{2}}") == ("\\frac{1}{2}", True)
    assert math_text.last_box("\\boxed{7\\}} x") == ("7\\}", True)  # an escaped brace
    assert math_text.last_box("\\boxed{1} \\boxed{2, 3") == ("2, 3", False)
    assert math_text.last_box("no box") is None
    assert math_text.join_groups("1\\,000 + 0.\\overline{3}") == "1000 + \\frac{3}{9}"
