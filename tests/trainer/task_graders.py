"""Graders for trainer tests, loaded by the grading runtime through ``"task_graders:NAME"`` specs."""

from __future__ import annotations

from typing import Any

from graders.types import Grade


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
