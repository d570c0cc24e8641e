"""Warm, killable helper processes shared by the threads of one process: a hard wall-clock bound on work
that cannot be interrupted from inside the interpreter.

SymPy on a hostile answer (the math grader) and trusted check code driven by a submission's values (the code
grader's assert checks: ``sum(range(10**10))`` is one C call that no trace function or signal handler can stop)
run in a child process that already imported what it needs (a ``graders.runtime.killable`` process, so the kill
also takes anything it started). The caller waits on its channel with a deadline and SIGKILLs it when the budget
is spent; a replacement starts in the background so the next call finds a warm helper again. Each helper module
serves one JSON request per line after writing ``ready`` (``serve``).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graders.runtime.killable import KillableProcess, child_channel

_REPO_ROOT = str(Path(__file__).resolve().parents[2])


class WorkerTimeout(Exception):
    """The budget ran out before the worker answered (the worker was killed)."""


class WorkerCrashed(Exception):
    """The worker died without answering (most likely the memory rlimit)."""


class _Worker:
    """One helper: a ``KillableProcess`` running ``module args...``, speaking one JSON request / reply per line."""

    def __init__(self, module: str, args: tuple[str, ...] = ()) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_REPO_ROOT, env.get("PYTHONPATH", "")]))
        self.proc = KillableProcess(module, args, env=env, stderr=subprocess.DEVNULL)
        self._buffer = b""
        self.ready = False

    def _readline(self, deadline: float) -> bytes:
        fd = self.proc.from_child
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerTimeout
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise WorkerCrashed
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def wait_ready(self, deadline: float) -> None:
        if not self.ready:
            if self._readline(deadline) != b"ready":
                raise WorkerCrashed
            self.ready = True

    def call(self, request: dict[str, Any], deadline: float) -> dict[str, Any]:
        data = json.dumps(request).encode() + b"\n"
        try:
            while data:  # a blocking pipe; a long request can take more than one write
                data = data[os.write(self.proc.to_child, data) :]
        except OSError as exc:  # broken pipe: it died
            raise WorkerCrashed from exc
        return dict(json.loads(self._readline(deadline)))

    def kill(self) -> None:
        """SIGKILL the helper (and anything it started) and wait for it."""
        self.proc.kill()


class HelperPool:
    """Up to ``max_workers`` warm children running ``module`` (with command-line ``args``), shared by all threads
    of this process.

    Waiting for a busy worker counts against the caller's budget (that is load); waiting for one that is still
    starting (first use, or the replacement of a killed one) does not (that is the pool warming up).
    """

    def __init__(
        self, module: str, max_workers: int = 4, startup_timeout_s: float = 60.0, args: tuple[str, ...] = ()
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self.module, self.args = module, args
        self.max_workers = max_workers
        self.startup_timeout_s = startup_timeout_s
        self._idle: list[_Worker] = []
        self._total = 0  # idle + busy + warming
        self._warming = 0
        self._cond = threading.Condition()
        self._pid = os.getpid()

    def _forget_after_fork(self) -> None:
        """In a forked child the inherited workers' pipes belong to the parent: start an empty pool instead."""
        if self._pid != os.getpid():
            self._idle, self._total, self._warming = [], 0, 0
            self._cond = threading.Condition()
            self._pid = os.getpid()

    def warm(self, count: int = 1) -> None:
        """Make ``count`` workers ready (idle) and wait for them: tests and benches start from a warm pool."""
        self._forget_after_fork()
        count = min(count, self.max_workers)
        with self._cond:
            missing = count - self._total
            self._total += max(missing, 0)
        for _ in range(missing):
            self._start_background()
        deadline = time.monotonic() + self.startup_timeout_s
        with self._cond:
            while len(self._idle) < count and self._total >= count and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())

    def _start_background(self) -> None:
        """Start a worker for a slot already counted in ``_total``, without making any caller wait for it."""
        with self._cond:
            self._warming += 1

        def start() -> None:
            try:
                worker = self._boot()
            except (WorkerTimeout, WorkerCrashed):
                return
            with self._cond:
                self._idle.append(worker)
                self._cond.notify_all()

        threading.Thread(target=start, name=f"{self.module}-start", daemon=True).start()

    def _acquire(self, budget_s: float) -> tuple[_Worker, float]:
        """An idle worker and the deadline its call must meet."""
        self._forget_after_fork()
        clock_start = time.monotonic()
        with self._cond:
            while not self._idle:
                if self._total < self.max_workers:
                    self._total += 1
                    self._warming += 1
                    break
                if self._warming:  # a worker is on its way: its import time is not this input's fault
                    self._cond.wait(self.startup_timeout_s)
                    clock_start = time.monotonic()
                    continue
                left = clock_start + budget_s - time.monotonic()
                if left <= 0:
                    raise WorkerTimeout
                self._cond.wait(left)
            else:
                return self._idle.pop(), clock_start + budget_s
        worker = self._boot()  # cold start in this thread
        return worker, time.monotonic() + budget_s

    def _boot(self) -> _Worker:
        """A ready worker for a slot already counted in ``_total`` and ``_warming``; a failed start frees it."""
        worker = _Worker(self.module, self.args)
        try:
            worker.wait_ready(time.monotonic() + self.startup_timeout_s)
        except (WorkerTimeout, WorkerCrashed):
            worker.kill()
            with self._cond:
                self._warming -= 1
                self._total -= 1
                self._cond.notify_all()
            raise
        with self._cond:
            self._warming -= 1
        return worker

    def run(self, request: dict[str, Any], budget_s: float) -> dict[str, Any]:
        """Send ``request`` to a worker; SIGKILL it if no answer arrives within ``budget_s``."""
        worker, deadline = self._acquire(budget_s)
        try:
            answer = worker.call(request, deadline)
        except (WorkerTimeout, WorkerCrashed):
            worker.kill()
            self._start_background()  # the replacement takes over this worker's slot in _total
            raise
        with self._cond:
            self._idle.append(worker)
            self._cond.notify_all()
        return answer

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._total -= len(idle)
        for worker in idle:
            worker.kill()


def serve(answer: Callable[[dict[str, Any]], dict[str, Any]], memory_limit_bytes: int) -> None:
    """Child side: limit memory, say ``ready``, then answer one JSON request per line until the owner leaves.

    A request that raises is answered ``{"ok": False, "error": ...}`` (``memory`` for a ``MemoryError``), so one
    bad request never costs a warm helper."""
    read_fd, write_fd = child_channel()
    inbox, out = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal reaches the caller, who kills us
    out.write(b"ready\n")
    out.flush()
    for line in inbox:
        try:
            reply = answer(json.loads(line))
        except MemoryError:
            reply = {"ok": False, "error": "memory"}
        except Exception as exc:  # keep serving: one bad request must not cost a warm worker
            reply = {"ok": False, "error": f"internal error: {type(exc).__name__}: {str(exc)[:200]}"}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()
