"""Code that runs inside a worker (process or Ray actor): grade one payload, never raise."""

from __future__ import annotations

import pickle
import time
import traceback
from typing import Any

from graders.registry import UnknownGraderError
from graders.runtime.request import Payload, resolve_grader
from graders.types import Grade, Verdict

# A Grade on the wire: its fields as a plain tuple, which pickles and rebuilds far cheaper than a dict or
# the dataclass itself (the parent rebuilds it with ``Grade(*fields)``, which re-validates it).
GradeFields = tuple[float, Verdict, str, dict[str, Any]]
# What a worker sends back per grade: (seq, grade fields, seconds spent).
Outcome = tuple[int, GradeFields, float]


def run_one(payload: Payload) -> Outcome:
    """Grade one payload; a grader that raises or returns garbage becomes ``Grade.error`` with the cause.
    A context (only for graders that declare fields) goes in as the ``context`` keyword."""
    seq, spec, response, ground_truth, options, context = payload
    start = time.perf_counter()
    try:
        grader = resolve_grader(spec)
        if context is None:
            grade = grader.grade(response, ground_truth, **options)
        else:
            grade = grader.grade(response, ground_truth, context=context, **options)
        if not isinstance(grade, Grade):
            grade = Grade.error(f"bad_return: grader {spec!r} returned {type(grade).__name__}, not Grade")
    except UnknownGraderError as exc:
        grade = Grade.error(f"unknown_grader: {exc}")
    except Exception as exc:  # a grader bug is a per-sample error, never a dead worker
        tb = traceback.format_exc(limit=8)
        grade = Grade.error(f"grader_exception: {type(exc).__name__}: {_text(exc)}", traceback=tb)
    return seq, _wire(spec, grade), time.perf_counter() - start


def _wire(spec: str, grade: Grade) -> GradeFields:
    """The grade's fields, checked to survive the trip to the parent (a pickle round trip): a result that
    could not be sent would kill the worker after the grade, and a requeued task would do it again."""
    fields = (float(grade.score), grade.verdict, str(grade.reason), grade.details or {})
    try:
        pickle.loads(pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as exc:  # whatever the details hold, its pickling failure is this grade's error
        why = f"{type(exc).__name__}: {_text(exc)}"
        return (0.0, "error", f"bad_return: grader {spec!r} returned details that do not pickle: {why}", {})
    return fields


def _text(exc: BaseException) -> str:
    """``str(exc)``, which grader code can make raise."""
    try:
        return str(exc)
    except Exception:  # an exception whose message cannot be built is still reported, by its type
        return "<unprintable>"
