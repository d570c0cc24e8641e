"""Composed rewards: several graders judge one response and their scores are summed with weights (TRL's
``reward_funcs`` + ``reward_weights``, verl's reward managers), e.g. correctness + a small format bonus.

The one place the composition is computed (the trainer's rollouts and evaluation use it). The verdict stays
sound: an ``error`` from any component makes the whole sample an ``error`` (masked, never a fake 0), naming
the component; otherwise the sample's verdict is the first component's (the one accuracy, pass@k and maj@k
count) and its reward is the weighted sum of every component's score.

A ``fallback`` component (e.g. an LLM judge behind the math grader) is a second opinion asked only when the
first component found no answer to judge (its grade says ``details["no_answer"]``): the fallback's grade
then stands in for the first one (verdict and weighted score). Otherwise it is ignored. A fallback that
errors leaves the first component's grade as it was: a response that gave no answer cannot buy itself a
masked sample by breaking the judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from graders.types import Grade


@dataclass(frozen=True)
class RewardTerm:
    """One component: a grader spec (name or ``module:attr``), its weight and its grade options."""

    name: str
    grader: str
    weight: float
    options: dict[str, Any] = field(default_factory=dict)
    fallback: bool = False  # asked only when the first component found no answer (module docstring)

    def __post_init__(self) -> None:
        if not math.isfinite(self.weight):
            raise ValueError(f"reward component {self.name!r}: weight must be finite, got {self.weight!r}")


def no_answer(grade: Grade) -> bool:
    """Whether a grader found no answer in the response (the cue for a ``fallback`` component)."""
    return grade.verdict == "incorrect" and bool(grade.details.get("no_answer"))


@dataclass(frozen=True)
class ComposedReward:
    """The judged components of one response. ``grade`` is the sample's verdict (see the module docstring);
    ``reward`` the weighted sum (0.0 when ``grade`` is an error: the sample is masked, the value unused)."""

    grade: Grade
    reward: float
    components: tuple[tuple[RewardTerm, Grade], ...]

    def scores(self) -> dict[str, float]:
        """Component name -> its grade's score (for ``reward/<name>/mean``)."""
        return {term.name: grade.score for term, grade in self.components}

    def row(self) -> dict[str, Any]:
        """What a samples / eval row records: the reward and each component's weight, score and verdict."""
        return {
            "reward": self.reward,
            "rewards": {
                term.name: {"weight": term.weight, "score": g.score, "verdict": g.verdict, "reason": g.reason}
                for term, g in self.components
            },
        }


def compose(terms: Sequence[RewardTerm], grades: Sequence[Grade | None]) -> ComposedReward:
    """Combine the grades of ``terms`` (same order) into one verdict and a weighted reward. A ``fallback``
    term's grade is read only when the first grade found no answer (it may be None otherwise: not asked)."""
    if not terms or len(terms) != len(grades):
        raise ValueError(f"compose needs one grade per term, got {len(terms)} terms and {len(grades)} grades")
    if terms[0].fallback:
        raise ValueError(f"reward component {terms[0].name!r}: the first component cannot be a fallback")
    first = grades[0]
    if first is None:
        raise ValueError(f"reward component {terms[0].name!r} has no grade")
    asked, verdict = no_answer(first), first
    pairs: list[tuple[RewardTerm, Grade]] = []
    for term, g in zip(terms, grades, strict=True):
        if term.fallback and not asked:
            continue  # not asked: the first component found an answer to judge
        if g is None:
            raise ValueError(f"reward component {term.name!r} has no grade")
        if term.fallback and g.verdict == "error":  # the first grade stands; the failure is on record
            verdict = replace(
                verdict, details={**verdict.details, "fallback_error": f"{term.name}: {g.reason}"}
            )
            continue
        if term.fallback:
            verdict = replace(
                g, reason=f"{g.reason} (fallback {term.name!r}: {terms[0].name!r} found no answer)"
            )
        pairs.append((term, g))
    return _combine(tuple(pairs), verdict)


def _combine(pairs: tuple[tuple[RewardTerm, Grade], ...], verdict: Grade) -> ComposedReward:
    for term, g in pairs:
        if g.verdict == "error":
            masked = Grade(
                0.0,
                "error",
                f"{g.reason} (reward component {term.name!r})",
                {**g.details, "component": term.name},
            )
            return ComposedReward(masked, 0.0, pairs)
    reward = sum(term.weight * g.score for term, g in pairs)
    return ComposedReward(verdict, float(reward), pairs)
