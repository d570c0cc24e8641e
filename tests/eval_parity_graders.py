"""The grader of ``test_grade_eval_parity``'s error case, in a module of its own: each grading worker imports
the spec's module, and the test module's own imports (the CLI, the trainer, torch) cost every worker seconds."""

from __future__ import annotations

from typing import Any

from graders.types import Grade


class EchoOrError:
    """Correct iff the response equals the ground truth; ``ERR`` cannot be judged (an ``error`` grade)."""

    name = "echo_or_error"
    version = "1.0.0"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        if response == "ERR":
            return Grade.error("could not judge")
        verdict = Grade.correct if response == str(ground_truth) else Grade.incorrect
        return verdict("", extracted=response)
