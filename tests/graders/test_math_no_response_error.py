"""No response can turn its own math grade into ``error`` (issue 28).

``error`` is masked in training (no penalty), so a response that can force it evades the penalty. It is left
for a gold that cannot be judged and for the infrastructure; whatever the response writes (odd sets, intervals,
braces, the empty set in any spelling, or an input that drives the grader into a bug) is judged ``incorrect``
when it is not the answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graders.math.grader as math_grader
from graders.math import MathGrader

GRADER = MathGrader(max_workers=2)

EMPTY_SPELLINGS = [
    "\\{\\}",
    "\\{\\ \\}",
    "\\{ \\}",
    "\\left\\{\\right\\}",
    "\\left\\{ \\right\\}",
    "\\{\\quad\\}",
    "\\{,\\}",
    "\\{;\\}",
    "\\varnothing",
    "\\emptyset",
    "\u2205",
]


@pytest.mark.parametrize("pred", EMPTY_SPELLINGS)
@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_an_empty_set_answer_is_judged_not_an_error(pred: str, mode: str) -> None:
    wrong = GRADER.grade(f"The answer is $\\boxed{{{pred}}}$.", "1", mode=mode)
    assert wrong.verdict == "incorrect", wrong
    right = GRADER.grade(f"The answer is $\\boxed{{{pred}}}$.", "\\varnothing", mode=mode)
    assert right.verdict == "correct", right


@pytest.mark.parametrize("gold", ["\\{\\}", "\\emptyset", "\\varnothing", "\\left\\{\\right\\}"])
def test_an_empty_set_gold_accepts_every_spelling_and_nothing_else(gold: str) -> None:
    for pred in EMPTY_SPELLINGS:
        assert GRADER.grade(f"\\boxed{{{pred}}}", gold).verdict == "correct", (gold, pred)
    for pred in ["0", "\\{0\\}", "\\{\\emptyset\\}", "x", "(0,1)", "\\{\\}\\cup\\{1\\}"]:
        result = GRADER.grade(f"\\boxed{{{pred}}}", gold)
        assert result.verdict == "incorrect", (gold, pred, result)


def test_a_grader_bug_driven_by_the_response_is_incorrect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever bug is left: when the gold judged against itself works, the response caused it."""
    real_parse = math_grader.parse

    def buggy_parse(text: str, depth: int = 0) -> Any:
        if "trigger" in text:
            raise IndexError("a bug this answer found")
        return real_parse(text, depth)

    monkeypatch.setattr(math_grader, "parse", buggy_parse)
    result = GRADER.grade("\\boxed{trigger}", "5")
    assert (result.verdict, result.details["cause"]) == ("incorrect", "grader bug"), result
    assert result.details["response_fault"] is True and "IndexError" in result.reason
    masked = GRADER.grade("\\boxed{trigger}", "5", mask_response_faults=True)
    assert masked.verdict == "error"
    gold_bug = GRADER.grade("\\boxed{5}", "trigger")  # the gold drives it: that is the grader's/gold's error
    assert gold_bug.verdict == "error", gold_bug


def test_a_helper_failure_driven_by_the_response_is_incorrect(monkeypatch: pytest.MonkeyPatch) -> None:
    real_run = GRADER.pool.run

    def run(request: dict[str, Any], budget_s: float) -> dict[str, Any]:
        if "y" in str(request.get("pred")):
            return {"ok": False, "error": "internal error: KeyError: 'y'"}
        return real_run(request, budget_s)

    monkeypatch.setattr(GRADER.pool, "run", run)
    result = GRADER.grade("\\boxed{\\sin(x) + y}", "\\cos(x)")
    assert (result.verdict, result.details["response_fault"]) == ("incorrect", True), result


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_a_chain_of_unreadable_parts_is_the_answers_not_the_golds(mode: str) -> None:
    """``\\}=\\{`` (found by hypothesis in CI): the strict chain check judged one part of the answer against
    another with the first in the gold's place, and its unreadability was blamed on the gold (``error``)."""
    for answer in ["\\}=\\{", "x=\\{", "\\}=\\}=\\{"]:
        result = GRADER.grade(f"\\boxed{{{answer}}}", "1", mode=mode)
        assert result.verdict == "incorrect", (answer, result)


GOLDS = [
    "1",
    "\\emptyset",
    "\\{1, 2\\}",
    "(0, 1]",
    "(-\\infty, 2) \\cup (3, \\infty)",
    "x = 2",
    "(1, 2)",
    "\\{\\}",
    "[-1, 1]",
    "\\frac{1}{2}",
    "x^2+1",
]
TOKENS = [
    "\\{", "\\}", "{", "}", "(", ")", "[", "]", ",", ";", " ", "\\ ", "\\quad", "\\,", "~",
    "\\left", "\\right", "\\left\\{", "\\right\\}", "\\cup", "\\cap", "\\emptyset", "\\varnothing", "\u2205",
    "\\infty", "-", "+", "1", "2", "x", "=", "<", "\\le", "\\in", "\\pm", "\\mathbb{R}", "\\text{and}", "or",
    "|", "\\frac", "^", "_", "\\sqrt", ".", "\\setminus", "\\backslash",
]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gold=st.sampled_from(GOLDS),
    answer=st.lists(st.sampled_from(TOKENS), min_size=0, max_size=12).map("".join),
    mode=st.sampled_from(["strict", "lenient"]),
)
def test_no_odd_set_interval_or_brace_answer_is_an_error(gold: str, answer: str, mode: str) -> None:
    result = GRADER.grade(f"The answer is $\\boxed{{{answer}}}$.", gold, mode=mode, timeout_s=5.0)
    assert result.verdict != "error", (gold, answer, result)
