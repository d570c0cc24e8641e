"""Local backend: killable worker processes fed through pipes by one supervisor thread.

Only killing a process bounds a grade (a thread stuck in SymPy or C code cannot be interrupted), so each
worker is a process in its own session; on a blown budget the whole session gets SIGKILL and a fresh worker
takes its place. Each worker holds a few prefetched tasks to hide IPC latency but reports every grade
separately, so the budget is per grade: a task's clock starts when the worker finishes the previous one.
Grader modules are imported ("warmed") before a worker takes tasks, so imports never eat a sample's budget.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Any

from graders.runtime.backend import OnOutcome, OutcomeKind
from graders.runtime.request import Task

PREFETCH = 4  # tasks queued per worker; small so a hung grade delays few others
WARM_BUDGET_S = 120.0  # a worker that cannot import its graders in this long is replaced
MAX_STARTUP_FAILURES = 5


class _Worker:
    def __init__(self, index: int, specs: list[str]) -> None:
        self.index = index
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        # Same import path as the pool's process, so "module:attr" specs resolve identically.
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "graders.runtime.procworker", str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w),
            start_new_session=True,  # own process group: killing it also kills what the grader started
            env=env,
            stdin=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.inbox = Connection(to_child_w, readable=False)
        self.outbox = Connection(from_child_r, writable=False)
        self.ready = False
        self.warm_since = time.monotonic()
        self.queue: deque[Task] = deque()  # sent, not yet answered; the head is running
        self.head_started = 0.0
        self.graded = 0
        self.ever_ready = False
        self.warm(specs)

    def warm(self, specs: list[str]) -> None:
        if specs:
            self.ready = False
            self.warm_since = time.monotonic()
        self.inbox.send(("warm", specs))

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.inbox.close()
        self.outbox.close()


class ProcessBackend:
    """A fixed number of worker processes; see the module docstring for the timeout design."""

    def __init__(self, workers: int, timeout_s: float, on_outcome: OnOutcome) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._size = workers
        self._timeout = timeout_s
        self._on_outcome = on_outcome
        self._host = socket.gethostname()
        self._lock = threading.Lock()
        self._pending: deque[Task] = deque()
        self._specs: list[str] = []  # every grader spec seen; new workers warm them all
        self._new_specs: list[str] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._ids = itertools.count()
        self._workers: list[_Worker] = []
        self.restarts = 0
        self._startup_failures = 0  # consecutive workers that died before their first "ready"
        self.failure: BaseException | None = None
        self._closing = False
        # Workers are created on the supervisor thread: their parent-death signal is tied to its lifetime.
        self._thread = threading.Thread(target=self._loop, name="grading-supervisor", daemon=True)
        self._thread.start()

    # -- caller side -------------------------------------------------------------------------------
    def warm(self, spec: str) -> None:
        """Have every worker import ``spec``'s grader before its next task."""
        with self._lock:
            self._new_specs.append(spec)
        self._wake()

    def dispatch(self, task: Task) -> None:
        with self._lock:
            self._pending.append(task)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # pipe full: a wake-up is already pending
            os.write(self._wake_w, b"x")

    def stats(self) -> dict[str, Any]:
        with self._lock:
            depth = len(self._pending) + sum(len(w.queue) for w in self._workers)
            workers = [
                {
                    "worker": w.index,
                    "pid": w.proc.pid,
                    "node": self._host,
                    "graded": w.graded,
                    "ready": w.ready,
                }
                for w in self._workers
            ]
        return {
            "backend": "process",
            "queue_depth": depth,
            "workers": workers,
            "worker_restarts": self.restarts,
        }

    def close(self) -> None:
        self._closing = True
        self._wake()
        self._thread.join(30)
        os.close(self._wake_r)
        os.close(self._wake_w)

    # -- supervisor thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._workers = [_Worker(next(self._ids), []) for _ in range(self._size)]
            while not self._closing:
                self._step()
        except BaseException as exc:  # surfaced to callers by the pool instead of hanging them
            self.failure = exc
        finally:
            self._shutdown_workers()

    def _shutdown_workers(self) -> None:
        for w in self._workers:
            with contextlib.suppress(OSError):  # a dead worker's pipe is already broken
                w.inbox.send(None)
        deadline = time.monotonic() + 1.0
        for w in self._workers:
            with contextlib.suppress(subprocess.TimeoutExpired):  # still busy: killed just below
                w.proc.wait(max(0.0, deadline - time.monotonic()))
            w.kill()

    def _step(self) -> None:
        with self._lock:
            new_specs, self._new_specs = self._new_specs, []
        for spec in new_specs:
            if spec not in self._specs:
                self._specs.append(spec)
                for w in self._workers:
                    w.warm([spec])
        self._fill()
        now = time.monotonic()
        deadlines = [w.head_started + self._timeout for w in self._workers if w.queue]
        deadlines += [w.warm_since + WARM_BUDGET_S for w in self._workers if not w.ready]
        wait_s = max(0.0, min(deadlines) - now) if deadlines else None
        handles: list[Any] = [self._wake_r] + [w.outbox for w in self._workers]
        ready = set(wait(handles, wait_s))
        if self._wake_r in ready:
            os.read(self._wake_r, 65536)
        for w in list(self._workers):
            if w.outbox in ready:
                self._drain(w)
        now = time.monotonic()
        for w in list(self._workers):
            if w.queue and now - w.head_started >= self._timeout:
                self._replace(w, head_kind="timeout", seconds=now - w.head_started)
            elif not w.ready and not w.queue and now - w.warm_since >= WARM_BUDGET_S:
                self._replace(w, head_kind="lost", seconds=0.0)

    def _fill(self) -> None:
        """Round-robin pending tasks over ready workers, one message per worker."""
        ready = [w for w in self._workers if w.ready]
        batches: dict[int, list[Task]] = {}
        with self._lock:
            progressed = True
            while self._pending and progressed:
                progressed = False
                for w in ready:
                    if self._pending and len(w.queue) + len(batches.get(w.index, ())) < PREFETCH:
                        batches.setdefault(w.index, []).append(self._pending.popleft())
                        progressed = True
        now = time.monotonic()
        for w in ready:
            batch = batches.get(w.index)
            if not batch:
                continue
            if not w.queue:
                w.head_started = now
            w.queue.extend(batch)
            try:
                w.inbox.send(("grade", [t.payload() for t in batch]))
            except OSError:  # broken pipe: the worker died; its tasks are requeued or reported
                self._replace(w, head_kind="lost", seconds=0.0)

    def _drain(self, w: _Worker) -> None:
        """Read every message the worker managed to send; replace it if its pipe closed (it died)."""
        try:
            while w.outbox.poll():
                msg = w.outbox.recv()
                if msg == ("ready",):
                    w.ready = w.ever_ready = True
                    self._startup_failures = 0
                    continue
                seq, grade, seconds = msg
                task = w.queue.popleft()
                if task.seq != seq:
                    raise RuntimeError(f"grading worker answered task {seq} but {task.seq} was at the head")
                w.graded += 1
                w.head_started = time.monotonic()
                self._on_outcome(task, "ok", grade, seconds, self._host)
        except (EOFError, OSError):
            self._replace(w, head_kind="lost", seconds=time.monotonic() - w.head_started)

    def _replace(self, w: _Worker, head_kind: OutcomeKind, seconds: float) -> None:
        """Kill ``w``, report its running task, requeue its prefetched ones, start a fresh worker."""
        w.kill()
        self.restarts += 1
        if not w.ever_ready:
            self._startup_failures += 1
            if self._startup_failures > MAX_STARTUP_FAILURES:
                raise RuntimeError(f"grading workers keep dying on startup (exit code {w.proc.returncode})")
        queued = list(w.queue)
        fresh = _Worker(next(self._ids), list(self._specs))
        with self._lock:
            self._workers[self._workers.index(w)] = fresh
            self._pending.extendleft(reversed(queued[1:]))
        if queued:
            self._on_outcome(queued[0], head_kind, None, seconds, self._host)
