"""The contract between the pool (cache, retries, metrics) and a backend (where grades physically run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from graders.runtime.request import Task
from graders.runtime.worker import GradeFields

# ok: the worker answered; timeout: the budget ran out and the worker was killed;
# lost: the worker died under the task (crash, OOM kill, node loss) -- an infrastructure failure.
OutcomeKind = Literal["ok", "timeout", "lost"]

# (task, kind, the grade's fields or None, seconds spent, id of the node it ran on)
TaskOutcome = tuple[Task, OutcomeKind, "GradeFields | None", float, str]

# Called with every outcome a backend has at hand at once: per-call costs (locks, wake-ups) are paid per
# chunk of results, not per sample.
OnOutcomes = Callable[[list[TaskOutcome]], None]


class Backend(Protocol):
    """Runs tasks on killable workers and reports exactly one outcome per dispatched task."""

    def warm(self, spec: str) -> None:
        """Load a grader in every worker ahead of its first task (imports must not eat a grade's budget)."""

    def dispatch_many(self, tasks: list[Task]) -> None:
        """Queue tasks; thread-safe and non-blocking (the pool bounds how many are in flight)."""

    def stats(self) -> dict[str, Any]:
        """Queue depth, workers and the node each runs on."""

    failure: BaseException | None  # set when the backend itself broke; the pool raises it to callers

    def close(self) -> None:
        """Stop workers; tasks not yet reported are dropped (the pool is shutting down)."""
