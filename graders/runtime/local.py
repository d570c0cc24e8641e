"""Local backend: killable worker processes fed by one supervisor thread.

Only killing a process bounds a grade (a thread stuck in SymPy or C code cannot be interrupted), so each
worker is a ``graders.runtime.killable`` process; on a blown budget it gets SIGKILL with everything it
started (SymPy helpers, a plugin's setsid children) and a fresh worker takes its place. A worker that dies
is charged for the tasks it started and did not report (retried alone, then failed: no livelock), one that
writes garbage on its result channel is replaced, and one over its ``WorkerLimits`` is recycled. To keep the runtime cost per sample tiny, work is sent in batches (queues of up to ~100 ms
of grading, shrinking at a batch's end so all workers finish together) and results come back in chunks;
the budget is still per grade, because each worker publishes the task it is running and when it started on
a shared page. The supervisor never blocks on a worker: writes are
non-blocking and buffered, so a worker stuck in C code cannot stall timeouts of the others.
Grader modules are imported ("warmed") before a worker takes tasks, so imports never eat a sample's budget.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import itertools
import math
import mmap
import os
import pickle
import select
import socket
import struct
import sys
import tempfile
import threading
import time
from collections import deque
from typing import Any

from graders.runtime.backend import OnOutcomes, OutcomeKind, TaskOutcome, WorkerLimits
from graders.runtime.frames import FrameReader
from graders.runtime.killable import KillableProcess
from graders.runtime.orphans import ContainerReaper
from graders.runtime.procworker import IDLE, PROGRESS_BYTES, read_progress, read_started
from graders.runtime.request import Task

QUEUE_S = 0.1  # grading time queued per worker: few wake-ups per sample; a hung grade's queue is requeued
MIN_PREFETCH, MAX_PREFETCH = 4, 4096
WARM_BUDGET_S = 120.0  # a worker that cannot import its graders in this long is replaced
MAX_STARTUP_FAILURES = 5
_READ, _WRITE = select.POLLIN | select.POLLHUP | select.POLLERR, select.POLLOUT | select.POLLERR
RSS_CHECK_S = 0.25  # how often a busy worker's memory is looked at
PIPE_BYTES = 1 << 20


def _frame(obj: Any) -> bytes:
    """``multiprocessing.connection`` framing, so the worker can ``Connection.recv()`` what we write raw."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > 0x7FFFFFFF:
        return struct.pack("!i", -1) + struct.pack("!Q", len(data)) + data
    return struct.pack("!i", len(data)) + data


def _widen_pipe(fd: int) -> None:
    """Linux: a 1 MiB pipe instead of 64 KiB, so a batch of long responses goes over in one write rather
    than a dozen supervisor round trips while the worker waits for the whole message."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or above pipe-max-size: keep the default
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


class _Worker:
    def __init__(self, index: int, specs: list[str], retiring: bool = False) -> None:
        self.index = index
        with tempfile.TemporaryFile() as page_file:
            page_file.truncate(PROGRESS_BYTES)
            self.page = mmap.mmap(page_file.fileno(), PROGRESS_BYTES)
            struct.pack_into("q", self.page, 0, IDLE)  # zeroed memory would claim task 0 ran since boot
            env = dict(os.environ)
            # Same import path as the pool's process, so "module:attr" specs resolve identically.
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
            self.proc = KillableProcess(
                "graders.runtime.procworker",
                [str(page_file.fileno())],
                env=env,
                pass_fds=(page_file.fileno(),),
            )
        self.to_child = self.proc.to_child
        for fd in (self.to_child, self.proc.from_child):
            _widen_pipe(fd)
        os.set_blocking(self.to_child, False)
        self.from_child = FrameReader(self.proc.from_child)
        self.outbuf = bytearray()  # framed messages not yet accepted by the pipe
        self.ready = False
        self.ever_ready = False
        self.retiring = retiring  # over a memory or grade-count limit: gets no new tasks, goes once drained
        self.pid: int | None = None  # the worker's, known once it is ready
        self.warm_since = time.monotonic()
        self.inflight: dict[int, Task] = {}  # sent and not yet answered, in send order
        self.graded = 0
        self.rss_checked = 0.0
        self.started = 0  # tasks the worker started, read from its page when it is killed
        self.suspect = -1  # seq of the retried task it runs alone (no other task goes with it)
        self.warm(specs)

    def send(self, msg: Any) -> None:
        self.outbuf += _frame(msg)
        self.flush()

    def flush(self) -> None:
        """Write what the pipe takes now; the rest waits for POLLOUT. Raises BrokenPipeError if it died."""
        while self.outbuf:
            try:
                n = os.write(self.to_child, self.outbuf)
            except BlockingIOError:
                return
            del self.outbuf[:n]

    def warm(self, specs: list[str]) -> None:
        if specs:
            self.ready = False
            self.warm_since = time.monotonic()
        self.send(("warm", specs))

    def running(self) -> tuple[Task, float] | None:
        """The task being graded right now and its start time, from the worker's progress page."""
        seq, started = read_progress(self.page)
        task = self.inflight.get(seq)
        return (task, started) if task is not None else None

    def started_unreported(self) -> list[Task]:
        """In-flight tasks the (killed) worker had started, graded or grading, but not reported, in order."""
        return list(itertools.islice(self.inflight.values(), max(0, self.started - self.graded)))

    def kill(self) -> None:
        """SIGKILL the worker and everything it started (the keeper sees to the descendants)."""
        self.proc.kill()
        self.started = read_started(self.page)  # final now
        self.page.close()


class ProcessBackend:
    """A fixed number of worker processes; see the module docstring for the design."""

    def __init__(
        self, workers: int, timeout_s: float, on_outcomes: OnOutcomes, limits: WorkerLimits | None = None
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._size = workers
        self._timeout = timeout_s
        self._limits = limits or WorkerLimits()
        self._containers = ContainerReaper()
        self._on_outcomes = on_outcomes
        self._host = socket.gethostname()
        self._lock = threading.Lock()
        self._pending: deque[Task] = deque()
        # Tasks a dead worker was charged for: each runs alone on an idle worker, so if it kills that one
        # too, no other task is charged with it.
        self._suspects: deque[Task] = deque()
        self._specs: list[str] = []  # every grader spec seen; new workers warm them all
        self._new_specs: list[str] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._ids = itertools.count()
        self._workers: list[_Worker] = []
        self._poller = select.poll()
        self._by_fd: dict[int, _Worker] = {}
        self._mean_s: float | None = None  # moving average of grade time, sizes the batches
        self.restarts = 0
        self.recycled = 0  # workers retired for their memory use or grade count
        self._startup_failures = 0  # consecutive workers that died before their first "ready"
        self.failure: BaseException | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="grading-supervisor", daemon=True)
        self._thread.start()

    # -- caller side -------------------------------------------------------------------------------
    def warm(self, spec: str) -> None:
        """Have every worker import ``spec``'s grader before its next task."""
        with self._lock:
            self._new_specs.append(spec)
        self._wake()

    def dispatch_many(self, tasks: list[Task]) -> None:
        with self._lock:
            was_empty = not self._pending and not self._suspects
            for t in tasks:
                (self._suspects if t.attempt else self._pending).append(t)
        if was_empty:  # a non-empty queue means the supervisor has a wake-up coming already
            self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # pipe full: a wake-up is already pending
            os.write(self._wake_w, b"x")

    def stats(self) -> dict[str, Any]:
        with self._lock:
            depth = len(self._pending) + len(self._suspects) + sum(len(w.inflight) for w in self._workers)
            workers = [
                {
                    "worker": w.index,
                    "pid": w.pid,
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
            "workers_recycled": self.recycled,
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
            self._poller.register(self._wake_r, select.POLLIN)
            for _ in range(self._size):
                self._add(_Worker(next(self._ids), []))
            while not self._closing:
                self._step()
        except BaseException as exc:  # surfaced to callers by the pool instead of hanging them
            self.failure = exc
        finally:
            self._shutdown_workers()

    def _add(self, w: _Worker) -> None:
        self._workers.append(w)
        self._by_fd[w.from_child.fd] = w
        self._by_fd[w.to_child] = w
        self._poller.register(w.from_child.fd, _READ)
        self._watch_writes(w)

    def _watch_writes(self, w: _Worker) -> None:
        if w.outbuf:
            self._poller.register(w.to_child, _WRITE)  # register() on a known fd modifies it
        else:
            with contextlib.suppress(KeyError):  # not registered
                self._poller.unregister(w.to_child)

    def _shutdown_workers(self) -> None:
        for w in self._workers:
            with contextlib.suppress(OSError):  # a dead or stuck worker: killed just below
                w.send(None)
        deadline = time.monotonic() + 1.0
        for w in self._workers:
            if not w.proc.wait(max(0.0, deadline - time.monotonic())):
                self._containers.request()  # killed busy: its atexit clean-up will not run
            w.kill()
        self._containers.drain()

    def _step(self) -> None:
        with self._lock:
            new_specs, self._new_specs = self._new_specs, []
        for spec in new_specs:
            if spec not in self._specs:
                self._specs.append(spec)
                for w in list(self._workers):
                    self._safely(w, w.warm, [spec])
        self._fill()
        events = self._poller.poll(self._next_wait_ms())
        for fd, _ in events:
            if fd == self._wake_r:
                os.read(self._wake_r, 65536)
                continue
            worker = self._by_fd.get(fd)
            if worker is None or worker not in self._workers:
                continue  # replaced earlier in this round
            if fd == worker.to_child:
                self._safely(worker, worker.flush)
            else:
                self._drain(worker)
        self._enforce_deadlines()

    def _next_wait_ms(self) -> int:
        now = time.monotonic()
        deadlines = [w.warm_since + WARM_BUDGET_S for w in self._workers if not w.ready]
        busy = False
        for w in self._workers:
            if w.inflight:
                busy = True
                running = w.running()
                if running is not None:
                    deadlines.append(running[1] + self._timeout)
        if busy:  # a batch not yet started has no deadline to wait for: look again soon
            deadlines.append(now + min(0.05, self._timeout / 4))
        if not deadlines:
            return -1
        return max(0, math.ceil((min(deadlines) - now) * 1000))

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for w in list(self._workers):
            running = w.running() if w.inflight else None
            if running is not None and now - running[1] >= self._timeout:
                self._replace(w, "timeout", now - running[1])
            elif not w.ready and not w.inflight and not w.retiring and now - w.warm_since >= WARM_BUDGET_S:
                self._replace(w, "lost", 0.0)

    def _prefetch(self) -> int:
        if self._mean_s is None:
            return 4
        return max(MIN_PREFETCH, min(MAX_PREFETCH, int(QUEUE_S / max(self._mean_s, 1e-6))))

    def _fill(self) -> None:
        """Top up ready workers whose queue fell under half the target.

        With several workers, queues are also capped at a quarter of each one's share of the work still to
        do, so they shrink as a batch nears its end and the last tasks stay here, for whichever worker runs
        dry first; and when the pending tasks cannot fill the needy queues, they go to the shortest queues
        first. Both keep every core busy until the end instead of one idling while another works through a
        long queue.
        """
        ready = [w for w in self._workers if w.ready and not w.retiring and w.suspect not in w.inflight]
        if not ready:
            return
        with self._lock:
            pending = self._pending
            if self._new_specs:  # warm new graders first (next round)
                return
            if self._suspects:  # let queues run dry until every suspect has an idle worker of its own
                idle = [w for w in ready if not w.inflight]
                suspects = [(w, [self._suspects.popleft()]) for w in idle[: len(self._suspects)]]
            else:
                suspects = []
        for w, batch in suspects:
            w.suspect = batch[0].seq
            self._send_batch(w, batch)
        if suspects or self._suspects:
            return
        with self._lock:
            if not pending:
                return
            loads = [len(w.inflight) for w in ready]
            target = self._prefetch()
            if len(ready) > 1:  # one worker has nobody to balance with: a cap would only cost round trips
                target = max(MIN_PREFETCH, min(target, (len(pending) + sum(loads)) // (4 * len(ready))))
            wants = [target - n if n <= target // 2 else 0 for n in loads]
            if not any(wants):
                return
            if sum(wants) > len(pending):
                wants = _level(loads, len(pending))
            cap = self._limits.max_grades
            if cap is not None:  # a worker due for recycling gets no more than it may still grade
                wants = [min(n, cap - w.graded - len(w.inflight)) for w, n in zip(ready, wants, strict=True)]
            batches = [
                (w, [pending.popleft() for _ in range(n)]) for w, n in zip(ready, wants, strict=True) if n > 0
            ]
        for w, batch in batches:
            self._send_batch(w, batch)

    def _send_batch(self, w: _Worker, batch: list[Task]) -> None:
        for t in batch:
            w.inflight[t.seq] = t
        self._safely(w, w.send, ("grade", [t.payload() for t in batch]))

    def _safely(self, w: _Worker, fn: Any, *args: Any) -> None:
        """Run a write to ``w``; a broken pipe means it died: replace it (its tasks are requeued/reported)."""
        try:
            fn(*args)
        except OSError:
            self._replace(w, "lost", 0.0)
            return
        self._watch_writes(w)

    def _drain(self, w: _Worker) -> None:
        """Report every result the worker managed to send, in one call; replace it if its pipe closed."""
        try:
            msgs, eof = w.from_child.read()
        except OSError:
            msgs, eof = [], True
        finished: list[TaskOutcome] = []
        inflight, host = w.inflight, self._host
        for msg in msgs:
            if msg[0] == "ready":
                w.pid = w.proc.pid  # before ready: a reader seeing a ready worker sees its pid
                w.ready = w.ever_ready = True
                self._startup_failures = 0
                continue
            outcomes = msg[1]
            finished += [(inflight.pop(seq), "ok", grade, seconds, host) for seq, grade, seconds in outcomes]
            w.graded += len(outcomes)
            mean = sum(o[2] for o in outcomes) / len(outcomes)
            self._mean_s = mean if self._mean_s is None else 0.7 * self._mean_s + 0.3 * mean
        if finished:
            self._on_outcomes(finished)
        if eof:  # it died or wrote garbage (its last good results, if any, are in already)
            running = w.running()
            self._replace(w, "lost", time.monotonic() - running[1] if running else 0.0)
        elif w.retiring and not w.inflight:
            self._retire(w)
        elif finished and not w.retiring:
            self._check_limits(w)

    def _check_limits(self, w: _Worker) -> None:
        """Recycle a worker over its grade count or memory cap: a fresh one starts now, this one gets no more
        tasks and goes once its queue is done (no grade is cut short)."""
        limits = self._limits
        over = limits.max_grades is not None and w.graded >= limits.max_grades
        now = time.monotonic()
        if not over and limits.max_rss_mb is not None and now - w.rss_checked >= RSS_CHECK_S:
            w.rss_checked = now
            over = w.proc.rss_bytes() > limits.max_rss_mb * 2**20
        if over:
            w.retiring = True
            self.recycled += 1
            self._add(_Worker(next(self._ids), list(self._specs)))
            if not w.inflight:
                self._retire(w)

    def _retire(self, w: _Worker) -> None:
        self._forget(w)
        with self._lock:
            self._workers.remove(w)
        w.kill()
        self._containers.request()

    def _forget(self, w: _Worker) -> None:
        for fd in (w.from_child.fd, w.to_child):  # fd numbers get reused by the replacement
            self._by_fd.pop(fd, None)
            with contextlib.suppress(KeyError):  # not registered
                self._poller.unregister(fd)

    def _replace(self, w: _Worker, kind: OutcomeKind, seconds: float) -> None:
        """Kill ``w``, report the tasks that may have caused it, requeue the others, start a fresh worker.

        On a timeout that is the running task. On a death (or garbage on its channel) it is every task the
        worker started and did not report -- a result that could not be sent, e.g. one that did not pickle,
        kills the worker after the grade -- so each is charged an attempt (the pool retries it up to
        ``retries`` times, then fails it): no task can kill workers forever. Tasks it never started are
        requeued free.
        """
        running = w.running()
        self._forget(w)
        w.kill()
        self._containers.request()
        self.restarts += 1
        if not w.ever_ready:
            self._startup_failures += 1
            if self._startup_failures > MAX_STARTUP_FAILURES:
                raise RuntimeError(f"grading workers keep dying on startup (exit code {w.proc.returncode})")
        if kind == "timeout":
            culprits = [running[0]] if running is not None else []
        else:
            culprits = w.started_unreported()
        charged = {t.seq for t in culprits}
        requeue = [t for t in w.inflight.values() if t.seq not in charged]
        with self._lock:
            self._workers.remove(w)
            self._pending.extendleft(reversed([t for t in requeue if not t.attempt]))
            self._suspects.extendleft(reversed([t for t in requeue if t.attempt]))
        if not w.retiring:  # a retiring worker's successor is up already
            self._add(_Worker(next(self._ids), list(self._specs)))
        if culprits:
            self._on_outcomes(
                [(t, kind, None, seconds if t is culprits[-1] else 0.0, self._host) for t in culprits]
            )


def _level(loads: list[int], n: int) -> list[int]:
    """How many of ``n`` tasks each queue gets so that the longest queue afterwards is as short as possible."""
    heap = [(load, i) for i, load in enumerate(loads)]
    heapq.heapify(heap)
    give = [0] * len(loads)
    for _ in range(n):
        load, i = heapq.heappop(heap)
        give[i] += 1
        heapq.heappush(heap, (load + 1, i))
    return give
