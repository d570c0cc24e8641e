"""The ``length`` grader: the share of a character budget a response uses, for a length penalty in a composed
reward (``{grader: length, weight: -0.1, options: {max_chars: 2000}}``). Counts characters, so it works the
same in ``rrl eval``; the token-level DAPO penalty is ``algorithm.overlong``."""

from __future__ import annotations

from typing import Any

from graders.types import Grade


class LengthGrader:
    """Score ``min(1, len(response) / max_chars)`` (verdict ``correct``: a measurement, never a judgement)."""

    name = "length"
    version = "1.0.0"

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError for bad options (``rrl grade`` and ``--dry-run`` ask before grading)."""
        unknown = sorted(set(options) - {"max_chars"})
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}; the length grader takes max_chars")
        limit = options.get("max_chars")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"length grader: max_chars must be a positive integer, got {limit!r}")

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        refused = Grade.refused_call(self.check_options, options, response)
        if refused is not None:
            return refused
        used = min(1.0, len(response) / options["max_chars"])
        return Grade(
            used, "correct", f"{len(response)} of {options['max_chars']} characters", {"chars": len(response)}
        )

    def golden_cases(self) -> list[dict[str, Any]]:
        return [
            {"response": "abcd", "ground_truth": None, "verdict": "correct", "options": {"max_chars": 8}},
            {"response": "abcd", "ground_truth": None, "verdict": "error", "note": "max_chars is required"},
            {"response": "a", "ground_truth": None, "verdict": "error", "options": {"max_chars": 0}},
        ]
