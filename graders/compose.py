"""Composed rewards: several graders judge one response and their scores are summed with weights (TRL's
``reward_funcs`` + ``reward_weights``, verl's reward managers), e.g. correctness + a small format bonus.

The one place the composition is computed (the trainer's rollouts and evaluation use it). The verdict stays
sound: an ``error`` from any component makes the whole sample an ``error`` (masked, never a fake 0), naming
the component; otherwise the sample's verdict is the first component's (the one accuracy, pass@k and maj@k
count) and its reward is the weighted sum of every component's score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from graders.types import Grade


@dataclass(frozen=True)
class RewardTerm:
    """One component: a grader spec (name or ``module:attr``), its weight and its grade options."""

    name: str
    grader: str
    weight: float
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not math.isfinite(self.weight):
            raise ValueError(f"reward component {self.name!r}: weight must be finite, got {self.weight!r}")


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


def compose(terms: Sequence[RewardTerm], grades: Sequence[Grade]) -> ComposedReward:
    """Combine the grades of ``terms`` (same order) into one verdict and a weighted reward."""
    if not terms or len(terms) != len(grades):
        raise ValueError(f"compose needs one grade per term, got {len(terms)} terms and {len(grades)} grades")
    pairs = tuple(zip(terms, grades, strict=True))
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
    return ComposedReward(grades[0], float(reward), pairs)
