"""Function tools run in killable worker processes, so a call's budget holds for every input.

A function on a thread cannot be stopped: a huge power or factorial computed in C holds the GIL and freezes the
event loop (and so every other trajectory's rollout) until it is done, whatever the budget said. Here the call runs
in a warm worker process (``function_worker``, kept by the grading runtime's ``HelperPool``, the same killable
helpers that bound the math and code graders); the caller waits on a thread that holds no GIL while it waits,
and the worker is SIGKILLed, with anything it started, when the budget runs out; a replacement starts in the
background. A worker's start is not part of a call's budget.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from graders.runtime import HelperPool, WorkerCrashed, WorkerTimeout

_WORKER = "reasoning_rl.tools.function_worker"
_START_TIMEOUT_S = 60.0  # a fresh worker imports the function's module (sympy: ~1 s on a quiet machine)


class ProcessRunner:
    """Runs ``module.qualname(*args)`` in up to ``max_workers`` warm processes at once; ``call`` returns
    ``(status, text)`` with status ``ok``, ``error`` (the function raised) or ``timeout`` (killed at the budget)."""

    def __init__(self, fn: Callable[..., Any], max_workers: int = 4) -> None:
        module, qualname = fn.__module__, fn.__qualname__
        if "<locals>" in qualname:
            raise ValueError(f"{qualname}: an isolated tool must be a module-level function")
        args = (json.dumps(sys.path), module, qualname)
        self._pool = HelperPool(_WORKER, max_workers, _START_TIMEOUT_S, args=args)

    async def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], budget_s: float) -> tuple[str, str]:
        return await asyncio.to_thread(self._run, {"args": list(args), "kwargs": kwargs}, budget_s)

    def _run(self, request: dict[str, Any], budget_s: float) -> tuple[str, str]:
        try:
            reply = self._pool.run(request, budget_s)
        except WorkerTimeout:
            return "timeout", f"timed out after {budget_s:.3g} s"
        except WorkerCrashed:  # killed by the OS, or it could not start: this call fails alone
            return "error", "the tool's worker process died"
        if not reply.get("ok"):
            error = reply.get("error", "")
            return "error", "MemoryError: the tool ran out of memory" if error == "memory" else error
        return str(reply["status"]), str(reply["text"])

    def close(self) -> None:
        self._pool.close()
