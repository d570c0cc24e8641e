"""Bounded staleness by admission, never by dropping (issue 31): which groups may enter the engine, and which
``B`` finished groups a step trains; how many generate at once is a separate bound (issue 44).

Versions: the engine holds policy version ``v`` (``v`` updates done) while it generates for step ``v + 1``,
and step ``v + 1`` trains with the trainer at version ``v``. A group admitted at version ``a`` has every token
at a version ``>= a``, so its lag when trained at version ``v`` is at most ``v - a``; it must be trained by
version ``a + max_lag`` (its *deadline*). Two bounds govern admission, and one rule selection:

- slots: at most ``slots`` (``rollout.running_groups``) admitted groups are unfinished (generating) at a time:
  a group is admitted whenever one finishes and frees its slot, at any point of a step (a constant running batch,
  as verl, AReaL and slime keep a fixed number of requests in flight), never ``B x (1 + max_lag)`` at once
  (issue 44: those all finished together, so every other step generated two batches and the next one nothing);
- staleness: at most ``capacity = B x (1 + max_lag)`` groups are admitted and untrained at any time: a free
  slot waits while that many are (the admission lookahead and the staleness cap are separate settings, as in
  AReaL and NeMo-RL);
- selection (earliest deadline first, over finished groups only): a step may train the oldest ``B`` finished
  groups only if, for every ``k = 0..max_lag``, it takes at least ``D_k - B k`` of the groups whose deadline is
  ``<= v + k`` (``D_k`` of them untrained): the steps after it can then still train every group in time.
  Otherwise the step waits for more groups to finish (admitting into the slots they free).

Invariant: ``D_k <= B (k + 1)`` for every ``k`` at every selection at version ``v``. For ``k = max_lag``,
``D_k`` counts every untrained group: the staleness bound. Every admission of the step, at its start or mid-step
(all before its selection), is at version ``v``, so its deadline ``v + max_lag`` adds to ``D_max_lag`` only. For
``k < max_lag``, the groups due by ``(v + 1) + k`` at the next step are those due by ``v + (k + 1)`` at this
selection less the ones it took: ``D_{k+1} - taken_{k+1} <= B (k + 1)`` by the selection rule. So the requirement
``D_k - B k`` is never more than ``B`` and, once every untrained group is finished, the oldest ``B`` satisfy it
(they take ``min(B, D_k) >= D_k - B k`` of each). The wait ends: an unfinished untrained group is generating (or
in a tool call) and finishes; with every untrained group finished and fewer than ``B`` of them, no slot is taken
and the capacity (``>= B``) is not reached, so the frontier admits. Slots only delay admissions, which the
invariant does not need, so any ``1 <= slots <= capacity`` keeps it (more than the capacity could never be
generating: ``rollout.running_groups`` is refused above it). ``max_lag = 0`` with ``slots = B`` is the
synchronous step: ``B`` groups admitted at its start, all of them due, the step waits for all and trains all,
and nothing is admitted before it has (the capacity is full).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field


@dataclass
class StalenessSchedule:
    """Tickets (admission order) and admission versions of the untrained groups; pure bookkeeping."""

    batch: int
    max_lag: int
    slots: int  # rollout.running_groups: groups kept generating (unfinished) at once, the running batch
    next_ticket: int = 0
    untrained: dict[int, int] = field(default_factory=dict)  # ticket -> admission version

    def __post_init__(self) -> None:
        if self.batch < 1 or self.max_lag < 0:
            raise ValueError(f"batch={self.batch} must be >= 1 and max_lag={self.max_lag} >= 0")
        if not 1 <= self.slots <= self.capacity:
            raise ValueError(f"slots={self.slots} must be in 1..batch x (1 + max_lag) = {self.capacity}")

    @property
    def capacity(self) -> int:
        return self.batch * (1 + self.max_lag)

    def room(self, running: int) -> int:
        """How many groups may be admitted now, ``running`` of the untrained ones being still unfinished: the
        free slots, as far as the staleness bound (the capacity) allows."""
        return max(0, min(self.slots - running, self.capacity - len(self.untrained)))

    def admit(self, version: int) -> int:
        """A new group generated from ``version`` on: its ticket."""
        if len(self.untrained) >= self.capacity:
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
