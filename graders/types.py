"""The shapes every grader, the runtime and the trainer agree on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Verdict = Literal["correct", "incorrect", "error"]
VERDICTS: tuple[Verdict, ...] = ("correct", "incorrect", "error")


@dataclass(frozen=True, slots=True)
class Grade:
    """One judgement. ``error`` means "could not judge": the trainer masks it instead of training on a fake 0."""

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

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "verdict": self.verdict, "reason": self.reason, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Grade:
        return cls(float(data["score"]), data["verdict"], data.get("reason", ""), dict(data.get("details") or {}))


@runtime_checkable
class Grader(Protocol):
    """What a grader plugin implements. ``version`` enters the cache key: bump it when judgements change."""

    name: str
    version: str

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade: ...
