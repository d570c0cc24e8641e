"""Turn an input row into grading requests, and finished grades back into one output line per row."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graders.evaluation.inputs import BadRow, Row
from graders.evaluation.scoring import answer_keys, equivalence_checks, score_row
from graders.gsm8k_rows import NotAGold, gsm8k_gold
from graders.runtime import resolve_grader
from graders.sources import RowGraderError, known_source_grader, row_grader
from graders.types import (
    ContextError,
    ContextField,
    Grade,
    GradeContext,
    Grader,
    context_fields,
    optional_context_fields,
)

# Keys ``rrl grade`` writes; an input field with one of these names is kept as "input_<name>".
RESULT_KEYS = (
    "row",
    "grader",
    "grader_version",
    "score",
    "verdict",
    "reason",
    "k",
    "n_correct",
    "n_error",
    "pass",
    "maj",
    "majority_answer",
    "grades",
)


class RowProblem(ValueError):
    """A row that cannot be graded; becomes an ``error`` line naming the row and the field."""


@dataclass
class Router:
    """Picks a grader per row: the row's ``grader``, else ``--grader``, else the ``data_source`` mapping, else
    the well-known ``data_source`` default (``graders.sources``: verl's ``openai/gsm8k`` -> ``gsm8k``)."""

    default: str | None = None
    by_source: dict[str, str] = field(default_factory=dict)
    # Called once per grader spec, when it is first loaded (before any of its rows is written).
    on_load: Callable[[str, Grader], None] | None = None
    _identity: dict[str, tuple[str, str]] = field(default_factory=dict)
    _fields: dict[str, tuple[tuple[ContextField, ...], tuple[ContextField, ...]]] = field(
        default_factory=dict
    )

    def route(self, row: Row) -> str:
        try:
            own = row_grader(row, trusted="--grader / --source-grader")
        except RowGraderError as exc:
            raise RowProblem(str(exc)) from None
        spec = own or self.default
        source = row.get("data_source")
        if not spec and isinstance(source, str):
            spec = self.by_source.get(source) or known_source_grader(source)
        if not spec:
            raise RowProblem(
                f"no grader for data_source {source!r:.200}: give the row a `grader` field, pass --grader, "
                "or map the source with --source-grader SOURCE=GRADER"
            )
        return spec

    def identity(self, spec: str) -> tuple[str, str]:
        """(name, version) of a grader spec; unknown graders are a row problem, not a crash."""
        if spec not in self._identity:
            try:
                grader = resolve_grader(spec)
            except Exception as exc:  # a grader that fails to load fails its rows, with the cause
                raise RowProblem(f"grader {spec!r} cannot be loaded: {type(exc).__name__}: {exc}") from exc
            if self.on_load is not None:
                self.on_load(spec, grader)
            self._identity[spec] = (str(grader.name), str(grader.version))
            self._fields[spec] = (context_fields(grader), optional_context_fields(grader))
        return self._identity[spec]

    def context_fields(self, spec: str) -> tuple[tuple[ContextField, ...], tuple[ContextField, ...]]:
        """The context fields the grader behind ``spec`` requires, and those it reads when present (after
        ``identity`` loaded it)."""
        self.identity(spec)
        return self._fields[spec]


@dataclass
class RowJob:
    number: int
    row: Row
    spec: str
    responses: list[str]
    ground_truth: Any
    grades: list[Grade | None]
    context: GradeContext | None = None  # the row's columns a context-declaring grader reads
    # Equivalence judgements for maj@k (see scoring.equivalence_checks), planned once the grades are in.
    checks: list[tuple[int, str]] = field(default_factory=list)
    check_grades: list[Grade | None] = field(default_factory=list)
    gold_from_gsm8k: bool = False  # the row's gold was a GSM8K worked solution; its final number is graded

    @property
    def done(self) -> bool:
        return all(g is not None for g in self.grades) and all(g is not None for g in self.check_grades)

    def plan_checks(self) -> list[tuple[int, str]]:
        """The equivalence judgements this row still needs (call once, when its grades are in)."""
        grades = [g for g in self.grades if g is not None]
        self.checks = equivalence_checks(answer_keys(grades, self.responses))
        self.check_grades = [None] * len(self.checks)
        return self.checks


def parse_row(number: int, row: Row, router: Router) -> RowJob:
    if "responses" in row and row["responses"] is not None:
        responses = row["responses"]
        if not isinstance(responses, list) or not responses:
            raise RowProblem("field `responses` must be a non-empty list of strings")
    elif "response" in row:
        responses = [row["response"]]
    else:
        raise RowProblem("missing field `response` (or `responses` for several samples)")
    for i, r in enumerate(responses):
        if not isinstance(r, str):
            raise RowProblem(f"response {i} is a {type(r).__name__}, not a string")
    if row.get("ground_truth") is not None:
        ground_truth = row["ground_truth"]
    elif isinstance(row.get("reward_model"), dict) and row["reward_model"].get("ground_truth") is not None:
        ground_truth = row["reward_model"]["ground_truth"]
    else:
        raise RowProblem("missing field `ground_truth` (or `reward_model.ground_truth`)")
    try:
        final = gsm8k_gold(ground_truth)
    except NotAGold as exc:
        raise RowProblem(str(exc)) from None
    if final is not None:
        ground_truth = final
    spec = router.route(row)
    router.identity(spec)
    context = None
    fields, optional = router.context_fields(spec)
    if fields or optional:
        try:
            context = row_context(number, row).only(fields, optional)
        except ContextError as exc:
            raise RowProblem(f"grader {spec!r}: {exc}") from None
    return RowJob(
        number,
        row,
        spec,
        list(responses),
        ground_truth,
        [None] * len(responses),
        context,
        gold_from_gsm8k=final is not None,
    )


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value
    )


def row_context(number: int, row: Row) -> GradeContext:
    """An input row as a grader's context: ``prompt`` (text or chat messages, verl's schema) or
    ``question``/``problem``, ``data_source``, ``extra_info`` (an object), ``id`` (else the row number)."""
    prompt = row.get("prompt")
    if prompt is None:
        prompt = row.get("question", row.get("problem"))
    if prompt is not None and not isinstance(prompt, str) and not _is_messages(prompt):
        raise RowProblem("field `prompt` must be a string or a list of {role, content} chat messages")
    extra = row.get("extra_info")
    if extra is not None and not isinstance(extra, dict):
        raise RowProblem(f"field `extra_info` must be an object, got {type(extra).__name__}")
    source = row.get("data_source")
    row_id = row.get("id")
    return GradeContext.from_messages(
        prompt,
        data_source=source if isinstance(source, str) else None,
        extra_info=extra,
        row_id=str(row_id) if row_id is not None else str(number),
    )


def _carry(row: Row) -> dict[str, Any]:
    return {(f"input_{k}" if k in RESULT_KEYS else k): v for k, v in row.items()}


def result_line(job: RowJob, router: Router) -> dict[str, Any]:
    grades = [g for g in job.grades if g is not None]
    name, version = router.identity(job.spec)
    score = score_row(grades, job.responses, job.checks, [g for g in job.check_grades if g is not None])
    k = score.k
    maj = score.maj
    if k == 1:
        verdict, reason = grades[0].verdict, grades[0].reason
    else:
        verdict = "error" if maj is None else ("correct" if maj else "incorrect")
        reason = f"{score.n_correct}/{k} correct" + (f", {score.n_error} errors" if score.n_error else "")
    return _carry(job.row) | {
        "row": job.number,
        "grader": name,
        "grader_version": version,
        "score": sum(g.score for g in grades) / k,
        "verdict": verdict,
        "reason": reason,
        "k": k,
        "n_correct": score.n_correct,
        "n_error": score.n_error,
        "pass": score.passed,
        "maj": maj,
        "majority_answer": score.majority_answer,
        "grades": [g.to_dict() for g in grades],
    }


def error_line(number: int, row: Row | BadRow, problem: str) -> dict[str, Any]:
    """The line written for a row that could not be graded at all."""
    carried = {"raw": row.raw} if isinstance(row, BadRow) else _carry(row)
    return carried | {
        "row": number,
        "score": 0.0,
        "verdict": "error",
        "reason": f"malformed_row: row {number}: {problem}",
        "k": 0,
        "grades": [],
    }
