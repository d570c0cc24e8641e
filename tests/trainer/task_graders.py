"""Graders for trainer tests, loaded by the grading runtime through ``"task_graders:NAME"`` specs."""

from __future__ import annotations

from typing import Any

from graders.types import Grade, GradeContext


class ContainsAnswer:
    """Correct when the ground truth appears anywhere in the response: a task a random tiny model hits
    by chance sometimes (so GRPO has signal) and can learn to hit always."""

    name = "contains_answer"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        if str(ground_truth) in response:
            return Grade.correct("contains the answer")
        return Grade.incorrect("answer not in response")


class FlakyContains(ContainsAnswer):
    """Like ``ContainsAnswer`` but cannot judge responses containing the letter 'e' (an infrastructure
    error the trainer must mask and count, not train on as a 0)."""

    name = "flaky_contains"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        if "e" in response:
            raise RuntimeError("simulated grader crash")
        return super().grade(response, ground_truth, **options)


class MislabelledContains(ContainsAnswer):
    """``ContainsAnswer`` shipping a wrong golden case: a run that routes to it must stop before step 1."""

    name = "mislabelled_contains"

    def golden_cases(self) -> list[dict[str, Any]]:
        return [
            {"response": "7", "ground_truth": "7", "verdict": "correct"},
            {"response": "8", "ground_truth": "7", "verdict": "correct", "note": "mislabelled on purpose"},
        ]


class TargetFromContext:
    """Reads the row: correct when the response contains ``extra_info["target"]``; an ``error`` when the prompt
    it was sent is not the row's own question (``extra_info["question"]``), so a run that trains with no
    masked sample proves every grade saw its own row's prompt and extra_info."""

    name = "target_from_context"
    version = "1"
    context_fields = ("prompt", "extra_info")

    def grade(self, response: str, ground_truth: Any, *, context: GradeContext, **options: Any) -> Grade:
        info = context.extra_info or {}
        if context.prompt != info.get("question"):
            return Grade.error(
                f"prompt {context.prompt!r} is not the row's question {info.get('question')!r}"
            )
        if str(info["target"]) in response:
            return Grade.correct("contains extra_info.target")
        return Grade.incorrect("extra_info.target not in response")


class AlwaysErrors(ContainsAnswer):
    """Judges nothing: every grade is an ``error`` with a free-text reason (a run routed to it has nothing to
    train on and must stop saying so, and the reason's text must not become a metric key)."""

    name = "always_errors"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        return Grade.error("Could not reach the judge service at http://judge:8000")
