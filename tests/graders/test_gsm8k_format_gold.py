"""Issue 28, low: the gsm8k final answer is a whole number or nothing, an empty ``\\boxed{}`` is empty whatever
spacing it holds, and a NaN ground truth is the gold's error, not the answer's zero."""

from __future__ import annotations

import pytest

from graders.format import FormatGrader
from graders.math import MathGrader
from graders.math.gsm8k import GSM8KGrader, final_answer

GSM8K = GSM8KGrader()
FORMAT = FormatGrader()


@pytest.mark.parametrize(
    ("response", "wrong_read"),
    [("#### 5-2", "5"), ("#### 7/2", "7"), ("#### 12-3", "12"), ("#### 5 - 2", "5"), ("#### 3:2", "3"),
     ("#### 8 \\div 2", "8"), ("#### 2*3", "2"), ("#### 2^3", "2"), ("#### 4=4", "4")],
)  # fmt: skip
def test_a_final_answer_that_goes_on_as_an_expression_is_malformed(response: str, wrong_read: str) -> None:
    """verl reads the number before the operator; we judge the malformed final answer incorrect."""
    answer, why = final_answer(f"Work...\n{response}")
    assert answer is None and "malformed" in why, (answer, why)
    g = GSM8K.grade(f"Work...\n{response}", wrong_read)
    assert g.verdict == "incorrect" and "malformed" in g.reason, g
    assert FORMAT.grade(response, None, style="gsm8k").verdict == "incorrect"


@pytest.mark.parametrize(
    ("response", "gold"),
    [("#### 5", "5"), ("#### 1,000", "1000"), ("#### -3", "-3"), ("#### 5.", "5"), ("#### 18 dollars", "18"),
     ("#### 7\n- a note", "7"), ("The answer:\n#### 42\nDone.", "42"), ("#### 5 #### 6", "6")],
)  # fmt: skip
def test_well_formed_final_answers_still_count(response: str, gold: str) -> None:
    assert GSM8K.grade(response, gold).verdict == "correct", response
    assert FORMAT.grade(response, None, style="gsm8k").verdict == "correct", response


@pytest.mark.parametrize(
    "box", ["\\quad", "\\qquad", "\\,", "\\;", "\\ ", "~", " ", "\\quad\\,~", "\\hspace{1em}", "\\$", "."]
)
def test_a_box_of_spacing_only_is_empty(box: str) -> None:
    g = FORMAT.grade(f"so \\boxed{{{box}}}", None)
    assert g.verdict == "incorrect", (box, g)


@pytest.mark.parametrize("box", ["0", "x", "\\emptyset", "\\text{odd}", "\\quad 7"])
def test_a_box_with_an_answer_is_the_format(box: str) -> None:
    assert FORMAT.grade(f"so \\boxed{{{box}}}", None).verdict == "correct", box


@pytest.mark.parametrize("gold", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_ground_truth_is_an_error_naming_it(gold: float) -> None:
    math_grader = MathGrader(max_workers=1)
    for response in ["\\boxed{3}", "\\boxed{nan}", "\\boxed{\\infty}"]:
        g = math_grader.grade(response, gold)
        assert g.verdict == "error" and "ground_truth" in g.reason and repr(gold) in g.reason, g
    assert GSM8K.grade("#### 3", gold).verdict == "error"
