"""A ``fallback`` reward component (issue 48): asked only when the first component found no answer, standing in
for it then; its failure leaves the first grade (a response cannot buy a masked sample by breaking it)."""

from __future__ import annotations

import pytest

import graders
from graders.compose import RewardTerm, compose, no_answer
from graders.types import Grade

MATH = RewardTerm("math", "math", 1.0)
JUDGE = RewardTerm("judge", "judge", 0.5, fallback=True)


def test_the_math_grader_marks_responses_without_an_answer() -> None:
    assert no_answer(graders.grade("math", "I am not sure.", "7"))
    assert no_answer(graders.grade("math", "<think>so it is 7", "7"))
    assert no_answer(graders.grade("gsm8k", "it is 7", "7"))
    assert not no_answer(graders.grade("math", "\\boxed{8}", "7"))
    assert not no_answer(graders.grade("gsm8k", "#### 8", "7"))


def test_fallback_stands_in_when_the_first_found_no_answer() -> None:
    first = Grade.incorrect("no answer found", no_answer=True)
    got = compose([MATH, JUDGE], [first, Grade.correct("judge: CORRECT")])
    assert got.grade.verdict == "correct" and "fallback" in got.grade.reason
    assert got.reward == pytest.approx(0.5) and got.scores() == {"math": 0.0, "judge": 1.0}


def test_fallback_is_ignored_when_the_first_judged_an_answer() -> None:
    for first in (Grade.correct("equivalent"), Grade.incorrect("not equivalent")):
        got = compose([MATH, JUDGE], [first, None])  # never asked
        assert got.grade == first and got.reward == first.score and set(got.scores()) == {"math"}
    # asked anyway (a caller that grades every component): still ignored, even an error
    got = compose([MATH, JUDGE], [Grade.correct(), Grade.error("judge_unparseable: ...")])
    assert got.grade.verdict == "correct" and got.reward == 1.0


def test_a_failing_fallback_leaves_the_first_grade() -> None:
    first = Grade.incorrect("no answer found", no_answer=True)
    got = compose([MATH, JUDGE], [first, Grade.error("judge_unparseable: chatty")])
    assert got.grade.verdict == "incorrect" and got.reward == 0.0
    assert "judge_unparseable" in got.grade.details["fallback_error"]


def test_an_error_of_the_first_component_still_masks() -> None:
    got = compose([MATH, JUDGE], [Grade.error("timeout"), None])
    assert got.grade.verdict == "error"


def test_the_first_component_cannot_be_a_fallback() -> None:
    from reasoning_rl.config import GradingConfig

    with pytest.raises(ValueError, match="first component cannot be a fallback"):
        compose([JUDGE, MATH], [Grade.correct(), Grade.correct()])
    with pytest.raises(ValueError, match="first component cannot be a fallback"):
        GradingConfig(rewards=[{"grader": "judge", "fallback": True}, {"grader": "math"}])
    cfg = GradingConfig(rewards=[{"grader": "math"}, {"grader": "judge", "fallback": True}])
    assert [t.fallback for t in cfg.rewards] == [False, True]
