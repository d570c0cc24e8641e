from __future__ import annotations

from rrl_exact_answer import ExactAnswerGrader, normalise

import graders


def test_normalise() -> None:
    assert normalise("  The  Eiffel Tower! ") == "the eiffel tower"
    assert normalise("-3.5.") == "-3.5"


def test_grades() -> None:
    g = ExactAnswerGrader()
    assert g.grade("work...\nAnswer: Paris.", "paris").verdict == "correct"
    assert g.grade("Answer: 3\nno wait\nAnswer: 4", 4).verdict == "correct"  # the last answer counts
    wrong = g.grade("Answer: Lyon", "Paris")
    assert wrong.verdict == "incorrect" and wrong.details["extracted"] == "lyon"
    assert g.grade("I think Paris", "Paris").reason == "no 'Answer:' line"
    assert g.grade("Answer: x", "x", strict=True).verdict == "error"


def test_registered_through_the_entry_point() -> None:
    assert "exact_answer" in graders.available()
    assert graders.get("exact_answer").version == "0.1.0"
    assert graders.grade("exact_answer", "Answer: 42", "42").verdict == "correct"


def test_ships_golden_cases_that_it_agrees_with():
    from graders.selftest import golden_cases

    grader = ExactAnswerGrader()
    cases, where = golden_cases(grader)
    assert where == "rrl_exact_answer/selftest.jsonl" and len(cases) == 4
    for case in cases:
        assert grader.grade(case.response, case.ground_truth, **case.options).verdict == case.verdict, (
            case.note
        )
