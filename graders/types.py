"""The shapes every grader, the runtime and the trainer agree on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Verdict = Literal["correct", "incorrect", "error"]
VERDICTS: tuple[Verdict, ...] = ("correct", "incorrect", "error")


@dataclass(frozen=True, slots=True)
class Grade:
    """One judgement: ``correct`` (score 1, or a partial score), ``incorrect`` (score 0) or ``error``.

    The rule every grader follows: ``error`` means the *infrastructure* could not judge (a sandbox or pool
    failure, a grader bug, a ground truth that cannot be parsed or checked); the trainer masks it instead of
    training on a fake 0. Whatever the *response* causes is ``incorrect``, with the reason: an answer that trips
    an expression guard, a prediction that alone exhausts the grader's budget, a proof that times out, crashes
    the checker or overflows its stack. Otherwise a policy would learn to force ``error`` (never penalised)
    whenever it is unsure. ``response_fault`` builds those grades; the math and Lean graders take the per-run
    option ``mask_response_faults=True`` to keep the old behaviour (such grades become ``error``), off by
    default. The trainer masks exactly ``verdict == "error"``.
    """

    score: float
    verdict: Verdict
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score must be in [0, 1], got {self.score!r}")

    @classmethod
    def correct(cls, reason: str = "", **details: Any) -> Grade:
        return cls(1.0, "correct", reason, details)

    @classmethod
    def incorrect(cls, reason: str = "", **details: Any) -> Grade:
        return cls(0.0, "incorrect", reason, details)

    @classmethod
    def error(cls, reason: str, **details: Any) -> Grade:
        return cls(0.0, "error", reason, details)

    @classmethod
    def response_fault(cls, reason: str, *, mask: bool = False, **details: Any) -> Grade:
        """The response exhausted a budget, tripped a guard or broke the checker: ``incorrect`` (marked
        ``response_fault`` in the details), or ``error`` when the run asked to ``mask`` such faults."""
        return cls(0.0, "error" if mask else "incorrect", reason, {**details, "response_fault": True})

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "verdict": self.verdict, "reason": self.reason, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Grade:
        return cls(
            float(data["score"]), data["verdict"], data.get("reason", ""), dict(data.get("details") or {})
        )


@runtime_checkable
class Grader(Protocol):
    """What a grader plugin implements. ``version`` enters the cache key: bump it when judgements change."""

    name: str
    version: str

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade: ...
