"""Function tools run in killable worker processes, so a call's budget holds for every input.

A function on a thread cannot be stopped: a huge power or factorial computed in C holds the GIL and freezes the
event loop (and so every other trajectory's rollout) until it is done, whatever the budget said. Here the call runs
in a warm child process (spawned once, reused across calls); the parent only waits on a pipe, on a thread that
holds no GIL while it waits, and kills the child when the budget runs out. The next call gets a fresh child.
Children are capped in memory (address space), so a memory bomb is a fast ``MemoryError``.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import resource
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

MEMORY_BYTES = 1 << 30  # address-space cap of a worker (sympy + its work fit well inside)
_START_TIMEOUT_S = 60.0  # a fresh worker imports the function's module (sympy: ~1 s on a quiet machine)


def _resolve(module: str, qualname: str) -> Callable[..., Any]:
    """The function by its import path; a ``FunctionTool`` under that name (``@tool`` replaced it) gives its ``fn``."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return getattr(obj, "fn", obj)


def _serve(conn: Connection, module: str, qualname: str) -> None:
    """Worker main: import the function once, then answer calls until the pipe closes."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    fn = _resolve(module, qualname)
    conn.send(("ready", ""))
    while True:
        try:
            args, kwargs = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", str(fn(*args, **kwargs))))
        except Exception as exc:  # noqa: BLE001 - the function's failure goes back to the caller as text
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class _Worker:
    def __init__(self, module: str, qualname: str) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork of a threaded trainer process
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, module, qualname), daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(_START_TIMEOUT_S):
            self.kill()
            raise RuntimeError(f"the worker for {module}.{qualname} did not start in {_START_TIMEOUT_S:g} s")
        status, _ = self.conn.recv()
        if status != "ready":
            raise RuntimeError(f"the worker for {module}.{qualname} failed to start")

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


class ProcessRunner:
    """Runs ``module.qualname(*args)`` in up to ``max_workers`` warm processes at once; ``call`` returns
    ``(status, text)`` with status ``ok``, ``error`` (the function raised) or ``timeout`` (killed at the budget)."""

    def __init__(self, fn: Callable[..., Any], max_workers: int = 4) -> None:
        self.module, self.qualname = fn.__module__, fn.__qualname__
        if "<locals>" in self.qualname:
            raise ValueError(f"{self.qualname}: an isolated tool must be a module-level function")
        self.max_workers = max_workers
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(
            max_workers
        )  # threading, not asyncio: each rollout has its loop

    async def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], budget_s: float) -> tuple[str, str]:
        return await asyncio.to_thread(self._run, (args, kwargs), budget_s)

    def _run(self, request: Any, budget_s: float) -> tuple[str, str]:
        with self._slots:
            worker = self._take()  # a worker's start is not part of the call's budget
            return self._exchange(worker, request, budget_s)

    def _take(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Worker(self.module, self.qualname)

    def _exchange(self, worker: _Worker, request: Any, budget_s: float) -> tuple[str, str]:
        started = time.monotonic()
        try:
            worker.conn.send(request)
            ready = worker.conn.poll(budget_s)
            if ready:
                status, text = worker.conn.recv()
        except (EOFError, OSError):  # the worker died mid-call (e.g. killed by the OS): this call fails alone
            worker.kill()
            return "error", "the tool's worker process died"
        if not ready:
            worker.kill()
            return "timeout", f"timed out after {time.monotonic() - started:.3g} s"
        with self._lock:
            self._idle.append(worker)
        return status, text

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()
