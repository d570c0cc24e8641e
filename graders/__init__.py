"""Deterministic graders for verifiable rewards. Never imports torch or vLLM."""

from __future__ import annotations

from typing import Any

from graders.functions import FunctionGrader, from_function, function_spec
from graders.registry import UnknownGraderError, available, get, register, unregister
from graders.sources import KNOWN_SOURCES, RowGraderError, known_source_grader, row_grader
from graders.types import (
    VERDICTS,
    ContextError,
    Grade,
    GradeContext,
    Grader,
    Verdict,
    context_fields,
    optional_context_fields,
)
from graders.untrusted_json import JSONLimitError, UntrustedJSONError, loads_untrusted

__all__ = [
    "KNOWN_SOURCES",
    "VERDICTS",
    "ContextError",
    "FunctionGrader",
    "Grade",
    "GradeContext",
    "Grader",
    "JSONLimitError",
    "RowGraderError",
    "UnknownGraderError",
    "UntrustedJSONError",
    "Verdict",
    "available",
    "context_fields",
    "from_function",
    "function_spec",
    "get",
    "grade",
    "known_source_grader",
    "loads_untrusted",
    "optional_context_fields",
    "register",
    "row_grader",
    "unregister",
]


def grade(
    name: str, response: str, ground_truth: Any, *, context: GradeContext | None = None, **options: Any
) -> Grade:
    """Grade one response in this process. For budgets, workers and caching use ``graders.runtime``.
    ``context`` reaches only a grader that declares ``context_fields`` (cut to them; ContextError when a
    declared field is missing) or ``optional_context_fields`` (None where the row lacks one)."""
    grader = get(name)
    fields, optional = context_fields(grader), optional_context_fields(grader)
    if not fields and not optional:
        return grader.grade(response, ground_truth, **options)
    if context is None and fields:
        raise ContextError(f"grader {name!r} needs context field(s) {', '.join(fields)}; pass context=")
    sent = (context or GradeContext()).only(fields, optional)
    return grader.grade(response, ground_truth, context=sent, **options)
