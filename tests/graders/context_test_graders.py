"""Graders for the row-context tests, loaded by workers through "module:attr" specs (built from ``__name__``)."""

from __future__ import annotations

from typing import Any

from graders.types import CONTEXT_FIELDS, Grade, GradeContext


class SeesContext:
    """Declares prompt + extra_info; reports every field it received (the others must be None)."""

    name = "sees_context"
    version = "1"
    context_fields = ("prompt", "extra_info")

    def grade(self, response: str, ground_truth: Any, *, context: GradeContext, **options: Any) -> Grade:
        seen = {f: getattr(context, f) for f in CONTEXT_FIELDS}
        target = str(context.extra_info["target"]) if context.extra_info else ""
        if target and target in response:
            return Grade.correct("contains extra_info.target", seen=seen)
        return Grade.incorrect("no extra_info.target", seen=seen)

    def golden_cases(self) -> list[dict[str, Any]]:
        ctx = {"prompt": "Say 7", "extra_info": {"target": 7}}
        return [
            {"response": "7", "ground_truth": None, "verdict": "correct", "context": ctx},
            {"response": "8", "ground_truth": None, "verdict": "incorrect", "context": ctx},
        ]


class NoContext:
    """Declares nothing: must never get a ``context`` keyword (it would land in ``options``)."""

    name = "no_context"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        return Grade.correct("ok", options=sorted(options))
