"""Graders for the governance tests, loaded through ``"governance_graders:NAME"`` specs (tests/graders on the path)."""

from __future__ import annotations

import os
from typing import Any

from graders.types import Grade


class Contains:
    """Correct when the ground truth appears in the response. Ships its golden cases in code."""

    name = "contains"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        return Grade.correct("found") if str(ground_truth) in response else Grade.incorrect("not found")

    def golden_cases(self) -> list[dict[str, Any]]:
        return [
            {"response": "it is 42", "ground_truth": "42", "verdict": "correct"},
            {"response": "it is 41", "ground_truth": "42", "verdict": "incorrect"},
        ]


class WrongGolden(Contains):
    """A plugin whose second golden case is mislabelled: the selftest must fail and name it."""

    name = "wrong_golden"

    def golden_cases(self) -> list[dict[str, Any]]:
        return [
            {"response": "it is 42", "ground_truth": "42", "verdict": "correct"},
            {"response": "it is 41", "ground_truth": "42", "verdict": "correct", "note": "mislabelled"},
        ]


class Versioned:
    """Version 1 (env GOV_VERSION unset or "1"): the answer may appear anywhere. Version 2: the response must
    be exactly the answer. Results stored under v1 flip under v2 where the answer was embedded in text."""

    name = "versioned"

    @property
    def version(self) -> str:
        return os.environ.get("GOV_VERSION", "1")

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        hit = str(ground_truth) in response if self.version == "1" else response.strip() == str(ground_truth)
        return Grade.correct() if hit else Grade.incorrect(f"v{self.version} rule")
