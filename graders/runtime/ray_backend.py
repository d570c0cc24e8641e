"""Ray backend: one-CPU grading actors placed anywhere in a Ray cluster, killed and replaced on timeout.

Same contract as the local backend: per-grade budget (a task's clock starts when the actor finishes the
previous one), exactly one outcome per task, actors warmed with the graders before taking tasks.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import time
from collections import deque
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from graders.runtime.backend import OnOutcomes, OutcomeKind, TaskOutcome, WorkerLimits
from graders.runtime.killable import rss_bytes
from graders.runtime.request import Payload, Task, warm_grader
from graders.runtime.worker import Outcome, run_one

PREFETCH = 2  # calls queued per actor (Ray runs an actor's calls in order)
POLL_S = 0.02  # how often the supervisor looks for new tasks while grades are running
ACTOR_START_BUDGET_S = 300.0
MAX_STARTUP_FAILURES = 5


@ray.remote(num_cpus=1, max_restarts=0)
class GradeActor:
    """Holds loaded graders; every call is a single grade so the driver can budget each one."""

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def warm(self, specs: list[str]) -> None:
        for spec in specs:
            warm_grader(spec)

    def grade(self, payload: Payload) -> tuple[Outcome, int]:
        """The outcome, and this actor's resident memory after it (the driver recycles a fat actor)."""
        return run_one(payload), rss_bytes()


def _driver_path() -> str:
    """The driver's import path, so "module:attr" specs resolve on actors as they do here (same machine
    or same layout; entry-point graders must be installed on every node anyway)."""
    return os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))


class _Actor:
    def __init__(self, index: int, specs: list[str]) -> None:
        self.index = index
        self.handle = GradeActor.options(  # type: ignore[attr-defined]
            scheduling_strategy="SPREAD", runtime_env={"env_vars": {"PYTHONPATH": _driver_path()}}
        ).remote()
        self.node_ref = self.handle.node_id.remote()
        self.node = "?"
        self.gate: Any = self.handle.warm.remote(specs)  # ready once this resolves
        self.gate_since = time.monotonic()
        self.ever_ready = False
        self.queue: deque[tuple[Task, Any]] = deque()  # (task, ObjectRef); the head is running
        self.head_started = 0.0
        self.graded = 0
        self.rss = 0  # bytes, as the actor reported with its last grade

    @property
    def ready(self) -> bool:
        return self.gate is None


class RayBackend:
    def __init__(
        self,
        workers: int,
        timeout_s: float,
        on_outcomes: OnOutcomes,
        limits: WorkerLimits | None = None,
        address: str | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            # WARNING: no "Started a local Ray instance" banner in the grading command's output
            ray.init(
                address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
            )
        self._size = workers
        self._timeout = timeout_s
        self._limits = limits or WorkerLimits()
        self._on_outcomes = on_outcomes
        self._lock = threading.Lock()
        self._pending: deque[Task] = deque()
        self._specs: list[str] = []
        self._new_specs: list[str] = []
        self._ids = itertools.count()
        self._actors: list[_Actor] = []
        self.restarts = 0
        self.recycled = 0
        self._startup_failures = 0
        self.failure: BaseException | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="grading-ray-supervisor", daemon=True)
        self._thread.start()

    # -- caller side -------------------------------------------------------------------------------
    def warm(self, spec: str) -> None:
        with self._lock:
            self._new_specs.append(spec)

    def dispatch_many(self, tasks: list[Task]) -> None:
        with self._lock:
            self._pending.extend(tasks)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            depth = len(self._pending) + sum(len(a.queue) for a in self._actors)
            workers = [
                {"worker": a.index, "node": a.node, "graded": a.graded, "ready": a.ready}
                for a in self._actors
            ]
        return {
            "backend": "ray",
            "queue_depth": depth,
            "workers": workers,
            "worker_restarts": self.restarts,
            "workers_recycled": self.recycled,
        }

    def close(self) -> None:
        self._closing = True
        self._thread.join(30)
        if self._owns_ray:
            ray.shutdown()

    # -- supervisor thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            with self._lock:
                self._actors = [_Actor(next(self._ids), []) for _ in range(self._size)]
            while not self._closing:
                self._step()
        except BaseException as exc:  # surfaced to callers by the pool instead of hanging them
            self.failure = exc
        finally:
            for a in self._actors:
                ray.kill(a.handle, no_restart=True)

    def _step(self) -> None:
        with self._lock:
            new_specs, self._new_specs = self._new_specs, []
        for spec in new_specs:
            if spec not in self._specs:
                self._specs.append(spec)
                for a in self._actors:
                    a.gate = a.handle.warm.remote(list(self._specs))
                    a.gate_since = time.monotonic()
        self._fill()
        refs = [ref for a in self._actors for _, ref in a.queue]
        refs += [a.gate for a in self._actors if a.gate is not None]
        done: list[Any] = []
        if refs:
            done, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
            if done:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        else:
            time.sleep(POLL_S)
        done_set = set(done)
        for a in list(self._actors):
            self._collect(a, done_set)
        now = time.monotonic()
        for a in list(self._actors):
            if self._over_limits(a) and not a.queue:
                self._recycle(a)
            elif a.queue and now - a.head_started >= self._timeout:
                self._replace(a, "timeout", now - a.head_started)
            elif a.gate is not None and now - a.gate_since >= ACTOR_START_BUDGET_S:
                self._replace(a, "lost", 0.0)

    def _over_limits(self, a: _Actor) -> bool:
        """Due for recycling: past its grade count or its resident-memory cap (``WorkerLimits``)."""
        limits = self._limits
        return (limits.max_grades is not None and a.graded >= limits.max_grades) or (
            limits.max_rss_mb is not None and a.rss > limits.max_rss_mb * 2**20
        )

    def _fill(self) -> None:
        cap = self._limits.max_grades
        ready = [a for a in self._actors if a.ready and not self._over_limits(a)]
        with self._lock:
            if self._new_specs:  # warm new graders first (next round)
                return
            progressed = True
            while self._pending and progressed:
                progressed = False
                for a in ready:
                    room = cap is None or a.graded + len(a.queue) < cap
                    if self._pending and len(a.queue) < PREFETCH and room:
                        task = self._pending.popleft()
                        if not a.queue:
                            a.head_started = time.monotonic()
                        a.queue.append((task, a.handle.grade.remote(task.payload())))
                        progressed = True

    def _collect(self, a: _Actor, done: set[Any]) -> None:
        finished: list[TaskOutcome] = []
        try:
            if a.gate is not None and a.gate in done:
                ray.get(a.gate)
                a.node = ray.get(a.node_ref, timeout=30)
                a.gate = None
                a.ever_ready = True
                self._startup_failures = 0
            while a.queue and a.queue[0][1] in done:
                task, ref = a.queue.popleft()
                (seq, grade, seconds), a.rss = ray.get(ref)
                a.graded += 1
                a.head_started = time.monotonic()
                finished.append((task, "ok", grade, seconds, a.node))
        except (RayActorError, GetTimeoutError, RayError):
            self._report(finished)
            self._replace(a, "lost", time.monotonic() - a.head_started)
            return
        self._report(finished)

    def _report(self, finished: list[TaskOutcome]) -> None:
        if finished:
            self._on_outcomes(finished)

    def _recycle(self, a: _Actor) -> None:
        """Swap an actor over its limits (nothing queued on it) for a fresh one."""
        ray.kill(a.handle, no_restart=True)
        self.recycled += 1
        fresh = _Actor(next(self._ids), list(self._specs))
        with self._lock:
            self._actors[self._actors.index(a)] = fresh

    def _replace(self, a: _Actor, head_kind: OutcomeKind, seconds: float) -> None:
        ray.kill(a.handle, no_restart=True)
        self.restarts += 1
        if not a.ever_ready:
            self._startup_failures += 1
            if self._startup_failures > MAX_STARTUP_FAILURES:
                raise RuntimeError("grading actors keep dying on startup; is the Ray cluster healthy?")
        queued = [task for task, _ in a.queue]
        fresh = _Actor(next(self._ids), list(self._specs))
        with self._lock:
            self._actors[self._actors.index(a)] = fresh
            self._pending.extendleft(reversed(queued[1:]))
        if queued:
            self._on_outcomes([(queued[0], head_kind, None, seconds, a.node)])
