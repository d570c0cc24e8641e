"""What the runtime moves around: a request from the caller and a task (request + bookkeeping) for workers."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from graders import registry
from graders.functions import is_function_spec, load_function_spec
from graders.types import ContextField, GradeContext, Grader

# What a worker needs for one grade: (seq, grader spec, response, ground truth, options, context or None).
Payload = tuple[int, str, str, Any, dict[str, Any], GradeContext | None]


@dataclass(frozen=True)
class GradeRequest:
    """One response to judge. ``grader`` is a registered name or a ``"module:attr"`` spec (see resolve_grader).

    ``context`` is the row (prompt, data_source, extra_info, id): the pool sends a grader only the fields it
    declares (``graders.types.context_fields``) and none to a grader that declares none.
    """

    grader: str
    response: str
    ground_truth: Any
    options: dict[str, Any] = field(default_factory=dict)
    id: Any = None
    context: GradeContext | None = None


@dataclass(slots=True)
class Task:
    """A request in flight. ``seq`` is unique per pool; ``attempt`` counts infrastructure retries.

    ``grader_name``, ``key``, ``sink`` and ``index`` are the pool's bookkeeping (stats bucket, cache key,
    where the grade goes and at which position), carried on the task so the pool needs no per-sample
    registry; backends only use ``seq``, ``attempt`` and ``payload()``.
    """

    seq: int
    request: GradeRequest
    grader_name: str = ""
    key: str | None = None
    sink: Any = None
    index: int = 0
    attempt: int = 0
    context: GradeContext | None = None  # the request's context cut to the grader's declared fields

    def payload(self) -> Payload:
        """The picklable part a worker needs (never the caller's id, which may not pickle)."""
        req = self.request
        return (self.seq, req.grader, req.response, req.ground_truth, req.options, self.context)


_spec_cache: dict[str, Grader] = {}


def importable_from_cwd(specs: Iterable[str]) -> None:
    """Let ``module:attr`` specs load from a plain .py file in the working directory, no packaging, in every
    command alike (``rrl grade``, ``rrl train``/``eval`` graders and tools): the ``rrl`` script's own sys.path
    lacks that directory (``python -m`` has it); grading workers inherit sys.path as their PYTHONPATH."""
    if any(":" in spec for spec in specs) and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def resolve_grader(spec: str) -> Grader:
    """A grader from a registry name, from ``"package.module:attr"`` (class or instance), or from
    ``"function=package.module:fn"`` (a TRL reward function or a verl compute_score, ``graders.functions``).

    The spec form lets worker processes and Ray actors load graders that are importable but not
    registered through entry points (test graders, notebooks' modules) without shipping objects.
    """
    if ":" not in spec:
        return registry.get(spec)
    grader = _spec_cache.get(spec)
    if grader is None:
        if is_function_spec(spec):  # "function=module:fn": a TRL reward function or a verl compute_score
            try:
                function: Grader = load_function_spec(spec)
            except (ImportError, AttributeError) as exc:
                raise registry.UnknownGraderError(f"cannot load function {spec!r}: {exc}") from exc
            _spec_cache[spec] = function
            return function
        module_name, _, attr = spec.partition(":")
        try:
            obj: Any = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise registry.UnknownGraderError(f"cannot load grader spec {spec!r}: {exc}") from exc
        grader = obj() if isinstance(obj, type) else obj
        if not isinstance(grader, Grader):
            hint = " (a reward function: name it as `function:` in grading.rewards)" if callable(obj) else ""
            raise TypeError(f"grader spec {spec!r} is not a Grader (needs name, version, grade()){hint}")
        _spec_cache[spec] = grader
    return grader


def cache_key(
    grader_name: str,
    grader_version: str,
    req: GradeRequest,
    context: GradeContext | None = None,
    fields: tuple[ContextField, ...] = (),
) -> str:
    """sha256 of canonical JSON of everything that determines a judgement: with a context, only the fields
    the grader declares (a column it does not read never invalidates its cached grades)."""
    parts: list[Any] = [grader_name, grader_version, req.options, req.ground_truth, req.response]
    if fields and context is not None:
        parts.append(context.key(fields))
    blob = json.dumps(
        parts,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=repr,
    )
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()  # lone surrogates too


def warm_grader(spec: str) -> None:
    """Load a grader in this worker and run its optional ``warm()`` hook (start helpers, import SymPy...).

    Workers call this before taking tasks, so one-off start-up costs never count against a grade's budget.
    A spec that fails to load is not an error here: every sample using it reports that, via ``run_one``.
    """
    try:
        warm = getattr(resolve_grader(spec), "warm", None)
        if callable(warm):
            warm()
    except Exception:  # not fatal: a grader that cannot start reports it on every sample, via run_one
        return
