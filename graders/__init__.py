"""Deterministic graders for verifiable rewards. Never imports torch or vLLM."""

from __future__ import annotations

from typing import Any

from graders.registry import UnknownGraderError, available, get, register, unregister
from graders.sources import KNOWN_SOURCES, known_source_grader
from graders.types import VERDICTS, Grade, Grader, Verdict

__all__ = [
    "KNOWN_SOURCES",
    "VERDICTS",
    "Grade",
    "Grader",
    "UnknownGraderError",
    "Verdict",
    "available",
    "get",
    "grade",
    "known_source_grader",
    "register",
    "unregister",
]


def grade(name: str, response: str, ground_truth: Any, **options: Any) -> Grade:
    """Grade one response in this process. For budgets, workers and caching use ``graders.runtime``."""
    return get(name).grade(response, ground_truth, **options)
