"""Warm, killable SymPy helper processes: the hard time and memory bound of the math grader.

SymPy can run for hours or eat all memory on a hostile answer (``10^{10^{10}}``, huge factorials), and
SIGALRM only works on the main thread. So every SymPy judgement runs in a child process that already imported
SymPy (a ``graders.runtime.killable`` process, so the kill also takes anything it started); the caller waits on
its channel with a deadline and SIGKILLs it when the budget is spent. A replacement
is started in the background so the next grade finds a warm worker again. Children carry an address-space
rlimit, so a memory bomb dies as a ``MemoryError`` (answered) or a crash (reported), never takes the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from graders.runtime.killable import KillableProcess, child_channel

MEMORY_LIMIT_BYTES = 3 * 1024**3
GOLD_UNREADABLE = (
    "ground truth does not parse"  # a helper's reply error: the gold, not the answer, is at fault
)
_REPO_ROOT = str(Path(__file__).resolve().parents[2])


class WorkerTimeout(Exception):
    """The budget ran out before the worker answered (the worker was killed)."""


class WorkerCrashed(Exception):
    """The worker died without answering (most likely the memory rlimit)."""


class _Worker:
    """One SymPy helper: a ``KillableProcess`` speaking one JSON request / reply per line."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_REPO_ROOT, env.get("PYTHONPATH", "")]))
        self.proc = KillableProcess("graders.math.worker", env=env, stderr=subprocess.DEVNULL)
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


class WorkerPool:
    """Up to ``max_workers`` warm children shared by all threads of this process.

    Waiting for a busy worker counts against the caller's budget (that is load); waiting for one that is still
    importing SymPy (first use, or the replacement of a killed one) does not (that is the pool warming up).
    """

    def __init__(self, max_workers: int = 4, startup_timeout_s: float = 60.0) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
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

        threading.Thread(target=start, name="math-grader-worker-start", daemon=True).start()

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
        worker = _Worker()
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


def _serve() -> None:
    """Child side: limit memory, import SymPy once, then answer one JSON request per line."""
    import resource

    read_fd, write_fd = child_channel()
    inbox, out = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal reaches the caller, who kills us
    sys.set_int_max_str_digits(20000)
    from graders.math.judge_request import answer, warm_up  # imports SymPy

    warm_up()

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


if __name__ == "__main__":
    _serve()
