"""Turn an input row into grading requests, and finished grades back into one output line per row."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graders.evaluation.inputs import BadRow, Row
from graders.evaluation.scoring import answer_key, majority_correct
from graders.runtime import resolve_grader
from graders.types import Grade

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
    """Picks a grader per row: the row's ``grader``, else ``--grader``, else the ``data_source`` mapping."""

    default: str | None = None
    by_source: dict[str, str] = field(default_factory=dict)
    _identity: dict[str, tuple[str, str]] = field(default_factory=dict)

    def route(self, row: Row) -> str:
        spec = row.get("grader") or self.default
        source = row.get("data_source")
        if not spec and isinstance(source, str):
            spec = self.by_source.get(source)
        if not spec:
            raise RowProblem(
                f"no grader for data_source {source!r}: give the row a `grader` field, pass --grader, "
                "or map the source with --source-grader SOURCE=GRADER"
            )
        if not isinstance(spec, str):
            raise RowProblem(f"field `grader` must be a string, got {type(spec).__name__}")
        return spec

    def identity(self, spec: str) -> tuple[str, str]:
        """(name, version) of a grader spec; unknown graders are a row problem, not a crash."""
        if spec not in self._identity:
            try:
                grader = resolve_grader(spec)
            except (KeyError, TypeError) as exc:
                raise RowProblem(str(exc)) from exc
            self._identity[spec] = (str(grader.name), str(grader.version))
        return self._identity[spec]


@dataclass
class RowJob:
    number: int
    row: Row
    spec: str
    responses: list[str]
    ground_truth: Any
    grades: list[Grade | None]

    @property
    def done(self) -> bool:
        return all(g is not None for g in self.grades)


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
    spec = router.route(row)
    router.identity(spec)
    return RowJob(number, row, spec, list(responses), ground_truth, [None] * len(responses))


def _carry(row: Row) -> dict[str, Any]:
    return {(f"input_{k}" if k in RESULT_KEYS else k): v for k, v in row.items()}


def result_line(job: RowJob, router: Router) -> dict[str, Any]:
    grades = [g for g in job.grades if g is not None]
    name, version = router.identity(job.spec)
    k = len(grades)
    n_correct = sum(g.verdict == "correct" for g in grades)
    n_error = sum(g.verdict == "error" for g in grades)
    keys = [
        answer_key(g, r) if g.verdict != "error" else None for g, r in zip(grades, job.responses, strict=True)
    ]
    maj, majority = majority_correct(keys, [g.verdict == "correct" for g in grades])
    if maj is None and n_error < k:
        maj = False  # judged responses, none with an answer: the majority answer is "no answer"
    if k == 1:
        verdict, reason = grades[0].verdict, grades[0].reason
    else:
        verdict = "error" if maj is None else ("correct" if maj else "incorrect")
        reason = f"{n_correct}/{k} correct" + (f", {n_error} errors" if n_error else "")
    return _carry(job.row) | {
        "row": job.number,
        "grader": name,
        "grader_version": version,
        "score": sum(g.score for g in grades) / k,
        "verdict": verdict,
        "reason": reason,
        "k": k,
        "n_correct": n_correct,
        "n_error": n_error,
        "pass": n_correct > 0,
        "maj": maj,
        "majority_answer": majority,
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
