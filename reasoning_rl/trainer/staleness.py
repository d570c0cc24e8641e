"""Bounded staleness by admission, never by dropping (issue 31): which groups may enter the engine, and which
``B`` finished groups a step trains.

Versions: the engine holds policy version ``v`` (``v`` updates done) while it generates for step ``v + 1``,
and step ``v + 1`` trains with the trainer at version ``v``. A group admitted at version ``a`` has every token
at a version ``>= a``, so its lag when trained at version ``v`` is at most ``v - a``; it must be trained by
version ``a + max_lag`` (its *deadline*). Two rules keep that true for every group, with exactly ``B`` groups
per step and no group ever discarded:

- admission: at most ``capacity = B x (1 + max_lag)`` groups are admitted and untrained at any time;
- selection (earliest deadline first, over finished groups only): a step may train the oldest ``B`` finished
  groups only if, for every ``k = 0..max_lag``, it takes at least ``D_k - B k`` of the groups whose deadline is
  ``<= v + k`` (``D_k`` of them untrained): the steps after it can then still train every group in time.
  Otherwise the step waits for more groups to finish.

By induction ``D_k <= B (k + 1)`` holds before every selection (the capacity gives it for the newest deadline,
the rule above for the others), so the requirement is never more than ``B`` and, once every untrained group is
finished, the oldest ``B`` always satisfy it: the wait ends. ``max_lag = 0`` is the synchronous step: ``B``
groups admitted, all of them due, the step waits for all and trains all.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field


@dataclass
class StalenessSchedule:
    """Tickets (admission order) and admission versions of the untrained groups; pure bookkeeping."""

    batch: int
    max_lag: int
    next_ticket: int = 0
    untrained: dict[int, int] = field(default_factory=dict)  # ticket -> admission version

    def __post_init__(self) -> None:
        if self.batch < 1 or self.max_lag < 0:
            raise ValueError(f"batch={self.batch} must be >= 1 and max_lag={self.max_lag} >= 0")

    @property
    def capacity(self) -> int:
        return self.batch * (1 + self.max_lag)

    def room(self) -> int:
        """How many groups may be admitted now."""
        return self.capacity - len(self.untrained)

    def admit(self, version: int) -> int:
        """A new group generated from ``version`` on: its ticket."""
        if self.room() < 1:
            raise RuntimeError(f"the engine already holds {len(self.untrained)} untrained groups (capacity)")
        ticket = self.next_ticket
        self.next_ticket += 1
        self.untrained[ticket] = version
        return ticket

    def deadline(self, ticket: int) -> int:
        """The last trainer version that may train this group."""
        return self.untrained[ticket] + self.max_lag

    def select(self, version: int, finished: Collection[int]) -> list[int] | None:
        """The ``B`` tickets the step at trainer ``version`` trains (oldest finished first), or None: wait."""
        if any(self.deadline(t) < version for t in self.untrained):
            raise RuntimeError(f"a group is past its staleness deadline at version {version}")
        done = sorted((self.untrained[t], t) for t in finished if t in self.untrained)
        chosen = [t for _, t in done[: self.batch]]
        if len(chosen) < self.batch:
            return None
        for k in range(self.max_lag + 1):
            horizon = version + k
            due = sum(1 for t in self.untrained if self.deadline(t) <= horizon)
            taken = sum(1 for t in chosen if self.deadline(t) <= horizon)
            if taken < due - self.batch * k:
                return None
        return chosen

    def trained(self, tickets: Collection[int]) -> None:
        for t in tickets:
            del self.untrained[t]

    def withdraw(self, ticket: int) -> None:
        """A group leaves untrained (dynamic sampling rejected it): its room goes to the next admission."""
        del self.untrained[ticket]

    def state(self) -> dict[str, object]:
        return {"next_ticket": self.next_ticket, "untrained": [[t, v] for t, v in self.untrained.items()]}

    def load_state(self, state: dict[str, object]) -> None:
        self.next_ticket = int(state["next_ticket"])  # type: ignore[call-overload]
        self.untrained = {int(t): int(v) for t, v in state["untrained"]}  # type: ignore[attr-defined]
