"""Example grader plugin: the response's last ``Answer: X`` line must equal the ground truth (normalised)."""

from __future__ import annotations

import re
import string
from typing import Any

from graders.types import Grade

_ANSWER = re.compile(r"^\s*answer\s*[:：]\s*(?P<answer>.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_DROP = str.maketrans("", "", string.punctuation.replace("-", "").replace(".", ""))


def normalise(text: str) -> str:
    """Lower case, no punctuation except '-' and '.', single spaces, no trailing dot."""
    return " ".join(text.translate(_DROP).lower().split()).rstrip(".")


class ExactAnswerGrader:
    name = "exact_answer"
    version = "0.1.0"
    selftest_file = (
        "selftest.jsonl"  # golden cases shipped as package data: `rrl graders selftest exact_answer`
    )

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        if options:
            return Grade.error(f"unknown option(s) {sorted(options)}; exact_answer takes none")
        if not isinstance(ground_truth, str | int | float):
            return Grade.error(f"ground_truth must be text or a number, got {type(ground_truth).__name__}")
        matches = _ANSWER.findall(response)
        if not matches:
            return Grade.incorrect("no 'Answer:' line", extracted=None)
        answer = normalise(matches[-1])
        if answer == normalise(str(ground_truth)):
            return Grade.correct("exact match", extracted=answer)
        return Grade.incorrect("different answer", extracted=answer)
