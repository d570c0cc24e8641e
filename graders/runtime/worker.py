"""Code that runs inside a worker (process or Ray actor): grade one payload, never raise."""

from __future__ import annotations

import time
import traceback
from typing import Any

from graders.registry import UnknownGraderError
from graders.runtime.request import resolve_grader
from graders.types import Grade, Verdict

# A Grade on the wire: its fields as a plain tuple, which pickles and rebuilds far cheaper than a dict or
# the dataclass itself (the parent rebuilds it with ``Grade(*fields)``, which re-validates it).
GradeFields = tuple[float, Verdict, str, dict[str, Any]]
# What a worker sends back per grade: (seq, grade fields, seconds spent).
Outcome = tuple[int, GradeFields, float]


def run_one(payload: tuple[int, str, str, Any, dict[str, Any]]) -> Outcome:
    """Grade one payload; a grader that raises or returns garbage becomes ``Grade.error`` with the cause."""
    seq, spec, response, ground_truth, options = payload
    start = time.perf_counter()
    try:
        grade = resolve_grader(spec).grade(response, ground_truth, **options)
        if not isinstance(grade, Grade):
            grade = Grade.error(f"bad_return: grader {spec!r} returned {type(grade).__name__}, not Grade")
    except UnknownGraderError as exc:
        grade = Grade.error(f"unknown_grader: {exc}")
    except Exception as exc:  # a grader bug is a per-sample error, never a dead worker
        tb = traceback.format_exc(limit=8)
        grade = Grade.error(f"grader_exception: {type(exc).__name__}: {exc}", traceback=tb)
    fields = (float(grade.score), grade.verdict, grade.reason, grade.details or {})
    return seq, fields, time.perf_counter() - start
