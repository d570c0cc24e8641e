"""GradingPool: the one API the trainer and ``rrl grade`` use to grade at scale.

The pool owns policy (cache, bounded retries, backpressure, metrics); a backend owns execution
(killable local processes or Ray actors). Results are ``Grade`` objects; anything that kept a sample from
being judged is ``verdict="error"`` with a reason ("timeout", "worker_lost", "grader_exception: ...").
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from graders.runtime.backend import Backend, TaskOutcome, WorkerLimits
from graders.runtime.cache import GradeCache, cache_version
from graders.runtime.metrics import GraderStats
from graders.runtime.request import GradeRequest, Task, cache_key, resolve_grader
from graders.types import (
    ContextError,
    ContextField,
    Grade,
    GradeContext,
    context_fields,
    optional_context_fields,
)

BackendName = Literal["auto", "process", "ray"]
# A loaded grader as the pool sees it: (name, cache version, the context fields it requires, those it reads
# when present, its ``version_for(options)`` hook or None: what else its judgements depend on, e.g. a model's
# files).
VersionFor = Callable[[dict[str, Any]], str]
Identity = tuple[str, str, tuple[ContextField, ...], tuple[ContextField, ...], VersionFor | None]
# Where finished tasks go (each task carries its sink): called with a chunk of (task, grade) at a time.
Sink = Callable[[list[tuple[Task, Grade]]], None]
_WAIT_SLICE_S = 0.25  # how often blocked callers re-check for a broken backend


class _BatchResults:
    """grade_batch's results: one slot per request (``task.index``), one wake-up when the last lands."""

    def __init__(self, n: int) -> None:
        self.grades: list[Grade | None] = [None] * n
        self.remaining = n
        self.done = threading.Condition()

    def __call__(self, finished: list[tuple[Task, Grade]]) -> None:
        with self.done:
            grades = self.grades
            for task, grade in finished:
                grades[task.index] = grade
            self.remaining -= len(finished)
            if not self.remaining:
                self.done.notify_all()


class GradingPool:
    """Grade requests on killable CPU workers with a hard per-grade budget.

    ``backend="auto"`` uses Ray when ``ray_address`` is given, ``RAY_ADDRESS`` is set or Ray is already
    initialised in this process; otherwise local worker processes. ``retries`` bounds re-runs of a sample
    whose worker died (and of grades a grader marks ``details["retryable"]=True``, e.g. sandbox
    failures); timeouts are not retried. ``max_in_flight`` bounds streamed samples queued or being graded:
    ``submit`` blocks beyond it (``grade_batch`` holds its whole list anyway and is not bounded by it).
    ``max_worker_rss_mb`` / ``max_grades_per_worker`` recycle a worker whose memory or grade count passes
    them (``WorkerLimits``; ``None`` turns one off).
    """

    def __init__(
        self,
        workers: int = 2,
        backend: BackendName = "auto",
        ray_address: str | None = None,
        timeout_s: float = 10.0,
        retries: int = 1,
        cache_path: str | os.PathLike[str] | None = None,
        max_in_flight: int = 256,
        max_worker_rss_mb: float | None = WorkerLimits.max_rss_mb,
        max_grades_per_worker: int | None = WorkerLimits.max_grades,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if retries < 0 or max_in_flight < 1:
            raise ValueError("retries must be >= 0 and max_in_flight >= 1")
        self.timeout_s = timeout_s
        self.retries = retries
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._slot_free = threading.Condition(self._lock)
        self._in_flight = 0  # dispatched and not yet finished (streamed and batched)
        self._seq = itertools.count()
        self._stats: dict[str, GraderStats] = {}
        self._nodes: Counter[str] = Counter()
        self._identities: dict[str, Identity | str] = {}
        self._out: queue.Queue[list[tuple[GradeRequest, Grade]]] = queue.Queue()
        self._stream_sink: Sink = self._to_stream  # one object, so _deliver can group a chunk by sink
        self._stream_outstanding = 0
        self._closed = False
        limits = WorkerLimits(max_rss_mb=max_worker_rss_mb, max_grades=max_grades_per_worker)
        self._cache = GradeCache(cache_path) if cache_path is not None else None
        self._backend = self._make_backend(backend, workers, ray_address, limits)

    def _make_backend(
        self, name: BackendName, workers: int, ray_address: str | None, limits: WorkerLimits
    ) -> Backend:
        if name not in ("auto", "process", "ray"):
            raise ValueError(f"backend must be 'auto', 'process' or 'ray', got {name!r}")
        use_ray = name == "ray" or (name == "auto" and (ray_address is not None or _ray_already_on()))
        if use_ray:
            from graders.runtime.ray_backend import RayBackend

            return RayBackend(workers, self.timeout_s, self._on_outcomes, limits, address=ray_address)
        from graders.runtime.local import ProcessBackend

        return ProcessBackend(workers, self.timeout_s, self._on_outcomes, limits)

    # -- public API --------------------------------------------------------------------------------
    def grade_batch(self, requests: Iterable[GradeRequest]) -> list[Grade]:
        """Grade all requests; the result list is in request order."""
        reqs = list(requests)
        results = _BatchResults(len(reqs))
        # The whole batch is already in memory, so it skips the in-flight window (which bounds streaming).
        # It is handed over in one go: preparing costs well under a microsecond a request, while handing
        # it over in pieces let this thread hold the GIL while the supervisor had workers to feed, and
        # made the backend size its queues for a small batch.
        tasks = self._prepare(reqs, results, bounded=False)
        if tasks:
            self._backend.dispatch_many(tasks)
        with results.done:
            while results.remaining:
                results.done.wait(_WAIT_SLICE_S)
                self._raise_if_broken()
        return [g for g in results.grades if g is not None]

    def submit(self, request: GradeRequest) -> None:
        """Queue one request for streaming; blocks while ``max_in_flight`` requests are being graded."""
        with self._lock:
            self._stream_outstanding += 1
        tasks = self._prepare([request], self._stream_sink, bounded=True)
        if tasks:
            self._backend.dispatch_many(tasks)

    def _to_stream(self, finished: list[tuple[Task, Grade]]) -> None:
        self._out.put([(task.request, grade) for task, grade in finished])

    def poll(self, timeout: float | None = 0.0) -> list[tuple[GradeRequest, Grade]]:
        """Finished (request, grade) pairs: waits up to ``timeout`` s for the first, then takes all ready."""
        got: list[tuple[GradeRequest, Grade]] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        while not got:
            with self._lock:
                if self._stream_outstanding == 0:
                    return got
            left = _WAIT_SLICE_S if deadline is None else min(_WAIT_SLICE_S, deadline - time.monotonic())
            try:
                got += self._out.get(timeout=max(0.0, left))
            except queue.Empty:
                self._raise_if_broken()
                if deadline is not None and time.monotonic() >= deadline:
                    return got
        while True:
            try:
                got += self._out.get_nowait()
            except queue.Empty:
                break
        with self._lock:
            self._stream_outstanding -= len(got)
        return got

    def results(self) -> Iterator[tuple[GradeRequest, Grade]]:
        """Yield (request, grade) as grades finish until every submitted request has been yielded."""
        while True:
            batch = self.poll(timeout=None)
            if not batch:
                return
            yield from batch

    def metrics(self) -> dict[str, Any]:
        """Per-grader counters plus pool-level queue depth, in-flight count, nodes used and workers."""
        backend = self._backend.stats()
        with self._lock:
            return {
                "graders": {name: s.snapshot() for name, s in self._stats.items()},
                "in_flight": self._in_flight,
                "queue_depth": backend.pop("queue_depth"),
                "nodes": dict(self._nodes),
                **backend,
            }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._backend.close()
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> GradingPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------------
    def _raise_if_broken(self) -> None:
        if self._closed and self._in_flight:
            raise RuntimeError("GradingPool was closed while grades were still pending")
        if self._backend.failure is not None:
            raise RuntimeError("the grading backend failed") from self._backend.failure

    def _identity(self, spec: str) -> Identity | str:
        """(name, version, context fields) of the grader behind ``spec``, or the error message if it cannot
        be loaded."""
        ident = self._identities.get(spec)
        if ident is None:
            try:
                grader = resolve_grader(spec)
                hook = getattr(grader, "version_for", None)
                ident = (
                    str(grader.name),
                    cache_version(grader),  # version + source hash
                    context_fields(grader),
                    optional_context_fields(grader),
                    hook if callable(hook) else None,
                )
            except Exception as exc:  # an unknown/broken grader fails its samples, not the pool
                ident = f"unknown_grader: {exc}"
            self._identities[spec] = ident
            if not isinstance(ident, str):
                self._backend.warm(spec)
        return ident

    @staticmethod
    def _option_version(version: str, version_for: VersionFor, options: dict[str, Any]) -> str | None:
        """The cache version of a grader whose judgements depend on what its options point at (a model
        directory: its files' hash), asked per request so a model changed mid-run regrades; None (no
        caching) when the hook fails: the grade itself then reports why."""
        try:
            return f"{version}+{version_for(dict(options))}"
        except Exception:  # e.g. a missing model directory: that request's grade says so, uncached
            return None

    def _stats_for(self, name: str) -> GraderStats:
        stats = self._stats.get(name)
        if stats is None:
            stats = self._stats[name] = GraderStats()
        return stats

    def _prepare(self, reqs: list[GradeRequest], sink: Sink, bounded: bool) -> list[Task]:
        """Answer cache hits and unknown graders right away; register the rest as tasks to dispatch.

        Per-request work is kept to building the task: cache keys only when a cache is on, one lock round
        for the whole chunk (streaming submits one request at a time, so ``bounded`` waits per request).
        """
        if self._closed:
            raise RuntimeError("GradingPool is closed")
        cache = self._cache
        identities = self._identities
        tasks: list[Task] = []
        instant: list[tuple[Task, Grade]] = []
        hits: Counter[str] = Counter()
        for index, req in enumerate(reqs):
            ident = identities.get(req.grader) or self._identity(req.grader)
            if isinstance(ident, str):
                instant.append((Task(-1, req, req.grader, None, sink, index), Grade.error(ident)))
                continue
            name, version, required, optional, version_for = ident
            fields = (*required, *optional)
            context = None
            if fields:
                try:
                    context = _declared_context(req, required, optional)
                except ContextError as exc:
                    missing = Grade.error(f"missing_context: {exc}")
                    instant.append((Task(-1, req, name, None, sink, index), missing))
                    continue
            key = None
            keyed: str | None = version
            if cache is not None and version_for is not None:
                keyed = self._option_version(version, version_for, req.options)
            if cache is not None and keyed is not None:
                key = cache_key(name, keyed, req, context, fields)
                hit = cache.get(key)
                if hit is not None:
                    hits[name] += 1
                    instant.append((Task(-1, req, name, key, sink, index), hit))
                    continue
            tasks.append(Task(next(self._seq), req, name, key, sink, index, context=context))
        if instant:
            with self._lock:
                for name, n in hits.items():
                    self._stats_for(name).cache_hits += n
                self._count(instant, None)
            sink(instant)
        if tasks:
            with self._slot_free:
                while bounded and self._in_flight >= self.max_in_flight:
                    self._slot_free.wait(_WAIT_SLICE_S)
                    self._raise_if_broken()
                self._in_flight += len(tasks)
        return tasks

    def _count(self, done: list[tuple[Task, Grade]], latencies_ms: list[float] | None) -> None:
        """Add finished grades (and their latencies; None for answers that never ran) to the per-grader
        stats, one ``record`` per grader; holds ``self._lock``."""
        name = done[0][0].grader_name
        if all(task.grader_name == name for task, _ in done):  # the usual chunk: a single grader
            self._stats_for(name).record([g for _, g in done], latencies_ms or [])
            return
        groups: dict[str, tuple[list[Grade], list[float]]] = {}
        for i, (task, grade) in enumerate(done):
            group = groups.get(task.grader_name)
            if group is None:
                group = groups[task.grader_name] = ([], [])
            group[0].append(grade)
            if latencies_ms is not None:
                group[1].append(latencies_ms[i])
        for name, (grades, latencies) in groups.items():
            self._stats_for(name).record(grades, latencies)

    def _on_outcomes(self, outcomes: list[TaskOutcome]) -> None:
        """Called on the backend's thread, exactly once per dispatched task (in chunks)."""
        done: list[tuple[Task, Grade]] = []
        latencies_ms: list[float] = []
        nodes: list[str] = []
        retry: list[Task] = []
        timed_out: list[str] = []  # grader names
        cache, retries = self._cache, self.retries
        for task, kind, fields, seconds, node in outcomes:
            if kind == "ok" and fields is not None:
                grade = _rebuild(task, fields)
                retryable = grade.verdict == "error" and bool(grade.details.get("retryable"))
                if not retryable and cache is not None and task.key is not None:
                    cache.put(task.key, grade.to_dict())
            else:
                retryable = kind == "lost"
                grade = self._infrastructure_error(task, kind)
            if retryable and task.attempt < retries:
                task.attempt += 1
                retry.append(task)
                continue
            if kind == "timeout":
                timed_out.append(task.grader_name)
            done.append((task, grade))
            latencies_ms.append(seconds * 1000.0)
            nodes.append(node)
        with self._slot_free:
            for task in retry:
                self._stats_for(task.grader_name).retries += 1
            for name in timed_out:
                self._stats_for(name).timeouts += 1
            if done:
                self._count(done, latencies_ms)
                self._nodes.update(nodes)
                self._in_flight -= len(done)
                self._slot_free.notify(len(done))
        if retry:
            self._backend.dispatch_many(retry)
        _deliver(done)

    def _infrastructure_error(self, task: Task, kind: str) -> Grade:
        if kind == "timeout":
            return Grade.error(
                f"timeout: no grade within {self.timeout_s:g}s; worker killed", budget_s=self.timeout_s
            )
        return Grade.error(f"worker_lost: worker died while grading ({task.attempt + 1} attempts)")


def _declared_context(
    req: GradeRequest, fields: tuple[ContextField, ...], optional: tuple[ContextField, ...] = ()
) -> GradeContext:
    """The request's context cut to the fields its grader declares (required and optional); ContextError
    naming a required one that is missing."""
    if req.context is None:
        if not fields:  # only optional fields: an empty context, each of them None
            return GradeContext()
        raise ContextError(
            f"grader {req.grader!r} needs context field(s) {', '.join(fields)}, "
            f"but request {req.id!r} carries no context"
        )
    return req.context.only(fields, optional)


def _rebuild(task: Task, fields: Any) -> Grade:
    """The worker's grade, or ``error: bad_return`` when its fields do not make a valid Grade."""
    try:
        return Grade(*fields)
    except (TypeError, ValueError) as exc:
        return Grade.error(f"bad_return: grader {task.request.grader!r} returned an invalid Grade: {exc}")


def _deliver(finished: list[tuple[Task, Grade]]) -> None:
    """Hand each run of results to its sink (a chunk almost always has a single one)."""
    start = 0
    for i in range(1, len(finished) + 1):
        if i == len(finished) or finished[i][0].sink is not finished[start][0].sink:
            finished[start][0].sink(finished[start:i])
            start = i


def _ray_already_on() -> bool:
    if os.environ.get("RAY_ADDRESS"):
        return True
    ray = sys.modules.get("ray")  # never import Ray just to ask: it is slow and may not be wanted
    return ray is not None and bool(ray.is_initialized())
