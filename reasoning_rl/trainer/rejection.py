"""Dynamic sampling (DAPO) on the frontier as reject-and-admit (issue 43): a finished, graded group whose judged
rewards are all equal carries no GRPO signal, so it is rejected (never trained, its prompt stays consumed) and
the frontier admits another prompt in its place, until a step has ``B`` informative finished groups.

The streamed waves refilled a step at most ``algorithm.max_refill_rounds`` times, ``B`` prompts a round at most;
here the same bound caps the groups a step may admit in place of rejected ones (``max_refill_rounds x B``).
Past it nothing more is rejected in that step: it trains the informative groups among those it selects, or,
when none is, all of them (their advantages are 0), as the waves trained their last batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasoning_rl.trainer.records import Rollouts, Sample
from reasoning_rl.trainer.rewards import informative_groups

REJECTED = "rollout/rejected_groups"  # the step's metric: groups rejected for no reward spread
REPLACED = "rollout/replacement_groups"  # the step's metric: groups admitted in place of rejected ones


def informative(samples: Sequence[Sample]) -> bool:
    """Whether one group's graded samples carry reward spread (``informative_groups`` over that group)."""
    return bool(informative_groups(samples))


@dataclass
class RejectAndAdmit:
    """A step's rejection budget and counts; reset by ``begin`` at each step."""

    batch: int
    max_refill_rounds: int
    rejected: int = 0
    replaced: int = 0

    @property
    def bound(self) -> int:
        """The most groups a step may admit in place of rejected ones."""
        return self.max_refill_rounds * self.batch

    def begin(self) -> None:
        self.rejected = self.replaced = 0

    def may_reject(self) -> bool:
        """Whether a group without signal may still be rejected (and replaced) in this step."""
        return self.replaced < self.bound

    def reject(self) -> None:
        """One group rejected and one admitted in its place."""
        self.rejected += 1
        self.replaced += 1

    def trained(self, rollouts: Rollouts) -> Rollouts:
        """What a step trains of its selected groups: the informative ones, or all when none is (the budget ran
        out: those without signal get advantage 0). The others are rejected without a replacement."""
        keep = informative_groups(rollouts.samples)
        if not keep:
            return rollouts
        self.rejected += len(rollouts.groups - keep)
        return rollouts.keep_groups(keep)

    def metrics(self) -> dict[str, float]:
        return {REJECTED: float(self.rejected), REPLACED: float(self.replaced)}
