"""The contract between the pool (cache, retries, metrics) and a backend (where grades physically run)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class WorkerLimits:
    """When a grading worker is recycled (replaced by a fresh one once its queue is done), so a grader
    that leaks memory cannot grow a worker without bound. ``None`` turns a limit off.

    ``max_rss_mb``: the worker's resident memory (its own, not its helpers', which have their own caps),
    checked every quarter second while it grades. A worker with the math, code and Lean graders loaded
    and 2000 math grades done holds about 26 MB (SymPy lives in the math grader's helpers), so the default
    is 20x that: room for big batches of long responses, yet a leak is cut off long before it hurts.
    ``max_grades``: a grade count, for leaks that RSS hides (off by default: a fresh worker costs its
    graders' warm-up).
    Both backends apply both limits (a Ray actor reports its RSS with every grade).
    """

    max_rss_mb: float | None = 512.0
    max_grades: int | None = None

    def __post_init__(self) -> None:
        if self.max_rss_mb is not None and self.max_rss_mb <= 0:
            raise ValueError(f"max_worker_rss_mb must be > 0 or None, got {self.max_rss_mb}")
        if self.max_grades is not None and self.max_grades < 1:
            raise ValueError(f"max_grades_per_worker must be >= 1 or None, got {self.max_grades}")
