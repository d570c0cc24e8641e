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
from dataclasses import dataclass
from typing import Any, Literal

from graders.runtime.backend import Backend, OutcomeKind
from graders.runtime.cache import GradeCache
from graders.runtime.metrics import GraderStats, error_kind
from graders.runtime.request import GradeRequest, Task, cache_key, resolve_grader
from graders.types import Grade

BackendName = Literal["auto", "process", "ray"]
Sink = Callable[[GradeRequest, Grade], None]
_WAIT_SLICE_S = 0.25  # how often blocked callers re-check for a broken backend
_DISPATCH_CHUNK = 512


@dataclass(slots=True)
class _Entry:
    sink: Sink
    grader_name: str
    key: str | None


class GradingPool:
    """Grade requests on killable CPU workers with a hard per-grade budget.

    ``backend="auto"`` uses Ray when ``ray_address`` is given, ``RAY_ADDRESS`` is set or Ray is already
    initialised in this process; otherwise local worker processes. ``retries`` bounds re-runs of a sample
    whose worker died (and of grades a grader marks ``details["retryable"]=True``, e.g. sandbox
    failures); timeouts are not retried. ``max_in_flight`` bounds streamed samples queued or being graded:
    ``submit`` blocks beyond it (``grade_batch`` holds its whole list anyway and is not bounded by it).
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
        self._entries: dict[int, _Entry] = {}
        self._seq = itertools.count()
        self._stats: dict[str, GraderStats] = {}
        self._nodes: Counter[str] = Counter()
        self._identities: dict[str, tuple[str, str] | str] = {}
        self._out: queue.Queue[tuple[GradeRequest, Grade]] = queue.Queue()
        self._stream_outstanding = 0
        self._closed = False
        self._cache = GradeCache(cache_path) if cache_path is not None else None
        self._backend = self._make_backend(backend, workers, ray_address)

    def _make_backend(self, name: BackendName, workers: int, ray_address: str | None) -> Backend:
        if name not in ("auto", "process", "ray"):
            raise ValueError(f"backend must be 'auto', 'process' or 'ray', got {name!r}")
        use_ray = name == "ray" or (name == "auto" and (ray_address is not None or _ray_already_on()))
        if use_ray:
            from graders.runtime.ray_backend import RayBackend

            return RayBackend(workers, self.timeout_s, self._on_outcome, address=ray_address)
        from graders.runtime.local import ProcessBackend

        return ProcessBackend(workers, self.timeout_s, self._on_outcome)

    # -- public API --------------------------------------------------------------------------------
    def grade_batch(self, requests: Iterable[GradeRequest]) -> list[Grade]:
        """Grade all requests; the result list is in request order."""
        reqs = list(requests)
        results: list[Grade | None] = [None] * len(reqs)
        remaining = [len(reqs)]
        done = threading.Condition()

        def sink_for(i: int) -> Sink:
            def sink(_req: GradeRequest, grade: Grade) -> None:
                with done:
                    results[i] = grade
                    remaining[0] -= 1
                    if not remaining[0]:  # one wake-up per batch, not per grade
                        done.notify_all()

            return sink

        # The whole batch is already in memory, so it skips the in-flight window (which bounds streaming);
        # it is handed over in chunks so workers start before the last request is prepared.
        chunk: list[Task] = []
        for i, req in enumerate(reqs):
            task = self._prepare(req, sink_for(i), bounded=False)
            if task is not None:
                chunk.append(task)
            if len(chunk) >= _DISPATCH_CHUNK:
                self._backend.dispatch_many(chunk)
                chunk = []
        if chunk:
            self._backend.dispatch_many(chunk)
        with done:
            while remaining[0]:
                done.wait(_WAIT_SLICE_S)
                self._raise_if_broken()
        return [g for g in results if g is not None]

    def submit(self, request: GradeRequest) -> None:
        """Queue one request for streaming; blocks while ``max_in_flight`` requests are being graded."""
        with self._lock:
            self._stream_outstanding += 1
        task = self._prepare(request, self._to_stream, bounded=True)
        if task is not None:
            self._backend.dispatch_many([task])

    def _to_stream(self, req: GradeRequest, grade: Grade) -> None:
        self._out.put((req, grade))

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
                got.append(self._out.get(timeout=max(0.0, left)))
            except queue.Empty:
                self._raise_if_broken()
                if deadline is not None and time.monotonic() >= deadline:
                    return got
        while True:
            try:
                got.append(self._out.get_nowait())
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
                "in_flight": len(self._entries),
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
        if self._closed and self._entries:
            raise RuntimeError("GradingPool was closed while grades were still pending")
        if self._backend.failure is not None:
            raise RuntimeError("the grading backend failed") from self._backend.failure

    def _identity(self, spec: str) -> tuple[str, str] | str:
        """(name, version) of the grader behind ``spec``, or the error message if it cannot be loaded."""
        ident = self._identities.get(spec)
        if ident is None:
            try:
                grader = resolve_grader(spec)
                ident = (str(grader.name), str(grader.version))
            except Exception as exc:  # an unknown/broken grader fails its samples, not the pool
                ident = f"unknown_grader: {exc}"
            self._identities[spec] = ident
            if not isinstance(ident, str):
                self._backend.warm(spec)
        return ident

    def _stats_for(self, name: str) -> GraderStats:
        stats = self._stats.get(name)
        if stats is None:
            stats = self._stats[name] = GraderStats()
        return stats

    def _prepare(self, req: GradeRequest, sink: Sink, bounded: bool) -> Task | None:
        """Answer from the cache (or an unknown-grader error) right away, else register a task to dispatch."""
        if self._closed:
            raise RuntimeError("GradingPool is closed")
        ident = self._identity(req.grader)
        if isinstance(ident, str):
            self._finish_now(req.grader, req, Grade.error(ident), sink)
            return None
        key = cache_key(ident[0], ident[1], req) if self._cache is not None else None
        if key is not None and self._cache is not None:
            hit = self._cache.get(key)
            if hit is not None:
                with self._lock:
                    self._stats_for(ident[0]).cache_hits += 1
                self._finish_now(ident[0], req, hit, sink)
                return None
        with self._slot_free:
            while bounded and len(self._entries) >= self.max_in_flight:
                self._slot_free.wait(_WAIT_SLICE_S)
                self._raise_if_broken()
            seq = next(self._seq)
            self._entries[seq] = _Entry(sink, ident[0], key)
        return Task(seq, req)

    def _finish_now(self, name: str, req: GradeRequest, grade: Grade, sink: Sink) -> None:
        with self._lock:
            self._count(self._stats_for(name), grade)
        sink(req, grade)

    @staticmethod
    def _count(stats: GraderStats, grade: Grade) -> None:
        stats.count += 1
        stats.verdicts[grade.verdict] += 1
        if grade.verdict == "error":
            stats.error_reasons[error_kind(grade.reason)] += 1

    def _on_outcome(
        self, task: Task, kind: OutcomeKind, grade_dict: dict[str, Any] | None, seconds: float, node: str
    ) -> None:
        """Called on the backend's thread, exactly once per dispatched task."""
        entry = self._entries[task.seq]
        stats = self._stats_for(entry.grader_name)
        retryable = kind == "lost" or (
            grade_dict is not None
            and grade_dict["verdict"] == "error"
            and bool((grade_dict.get("details") or {}).get("retryable"))
        )
        if retryable and task.attempt < self.retries:
            with self._lock:
                stats.retries += 1
            task.attempt += 1
            self._backend.dispatch_many([task])
            return
        if kind == "ok" and grade_dict is not None:
            grade = Grade.from_dict(grade_dict)
        elif kind == "timeout":
            grade = Grade.error(
                f"timeout: no grade within {self.timeout_s:g}s; worker killed", budget_s=self.timeout_s
            )
        else:
            grade = Grade.error(f"worker_lost: worker died while grading ({task.attempt + 1} attempts)")
        if entry.key is not None and self._cache is not None and kind == "ok":
            self._cache.put(entry.key, grade_dict or {})
        with self._lock:
            self._count(stats, grade)
            if kind == "timeout":
                stats.timeouts += 1
            stats.observe_latency(seconds * 1000.0)
            self._nodes[node] += 1
            del self._entries[task.seq]
            self._slot_free.notify()
        entry.sink(task.request, grade)


def _ray_already_on() -> bool:
    if os.environ.get("RAY_ADDRESS"):
        return True
    ray = sys.modules.get("ray")  # never import Ray just to ask: it is slow and may not be wanted
    return ray is not None and bool(ray.is_initialized())
