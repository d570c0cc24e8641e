"""``python``: runs a cell of model-written code in the sandbox, REPL-style; state persists across the calls of
one trajectory and nothing is shared between trajectories.

Semantics (a live interpreter per trajectory). A trajectory's calls go to one warm sandbox it holds
(``RunRequest.session``) whose fork server keeps a python child alive between cells: variables, imports, files
and background processes of earlier cells are there, and a value the model saw (``time``, ``random``,
``os.urandom``, ``uuid``, a temporary file's name, a file read) is the value the next cell sees, as in a real
REPL. The sandbox's zygote (a clean interpreter forked when the sandbox starts, before any request) imports
sympy, numpy and mpmath once (``SCI_IMAGE``, ``SCI_PRELOAD``) and forks each trajectory's child from itself, so
``import sympy`` in a cell costs nothing and no child's memory holds anything of an earlier trajectory.
``end_session`` gives the sandbox back: the supervisor ends the child, kills every process and wipes files and
IPC before any other trajectory gets it.

Held sandboxes are bounded (the Docker pool's size; ``max_sessions`` for the local backend): when more
trajectories are in flight, the least recently used one gives its sandbox back, and its next call replays its
earlier cells silently into a new interpreter (``ReplCell.history``; ``random`` and ``numpy.random`` are seeded
when an interpreter starts, so a replay recomputes those; clocks and ``os.urandom`` it cannot). Cells that ran
out of time, memory or output, or killed the interpreter, end it: they are not replayed, the earlier ones are.
A call's cell gets ``budget_s``; the whole run (a replay included) at most 4 x ``budget_s``.

Why not replay every call (the design before): its 10th call re-ran cells 1-9 and their imports (hundreds of
ms for sympy each time); bench/RESULTS.md#tool-calls has both designs' figures.

Limits are the code grader's defaults: 512 MB memory (also as an address-space cap on the interpreter, so a
memory bomb is a fast ``MemoryError``), 64 processes, 1 CPU, 1 MiB output per stream, no network; the model
sees at most ``max_output_chars`` of the output (head and tail).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from reasoning_rl.registry import TOOLS
from reasoning_rl.tools.base import ToolResult, ToolStatus
from sandboxes import Limits, RunRequest, RunResult, Sandbox, open_sandbox
from sandboxes.image import SCI_IMAGE, SCI_PRELOAD
from sandboxes.types import ReplCell


@dataclass
class _Session:
    """A trajectory's cells so far (replayed only into a new interpreter) and its sandbox session's key: unique
    per trajectory life, so a name reused after ``end_session`` never meets the old state."""

    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    cells: list[str] = field(default_factory=list)


class PythonTool:
    name = "python"
    description = (
        "Run Python 3 code; printed output (and a trailing expression's value) is returned. "
        "Variables persist between calls."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"code": {"type": "string"}},
        "required": ["code"],
    }

    def __init__(
        self,
        sandbox: Sandbox | str = "auto",
        *,
        pool_size: int = 4,
        memory_mb: int = 512,
        output_bytes: int = 1 << 20,
        max_output_chars: int = 2000,
        image: str = SCI_IMAGE,
        preload: tuple[str, ...] = SCI_PRELOAD,
    ) -> None:
        if isinstance(sandbox, str):
            options: dict[str, Any] = {"image": image}
            options.update({"max_sessions": pool_size} if sandbox == "local" else {"pool_size": pool_size})
            sandbox = open_sandbox(sandbox, **options)
            self._owns_sandbox = True
        else:
            self._owns_sandbox = False
        self.sandbox = sandbox
        self.memory_mb, self.output_bytes, self.max_output_chars = memory_mb, output_bytes, max_output_chars
        self.preload = tuple(preload)
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max(pool_size, 1), thread_name_prefix="python-tool")

    async def call(self, arguments: dict[str, Any], *, session: str, budget_s: float) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult("Error: the python tool needs a string argument 'code'", "invalid_call")
        with self._lock:
            state = self._sessions.setdefault(session, _Session())
            key, history = state.key, tuple(state.cells)
        wall = 4 * budget_s  # a cell gets budget_s; the rest is for replaying history into a new interpreter
        request = RunRequest(
            [],
            repl=ReplCell(code, history, self.preload, cell_s=budget_s, address_space_mb=self.memory_mb),
            session=key,
            env={"PYTHONHASHSEED": "0"},
            limits=Limits(wall_s=wall, memory_mb=self.memory_mb, output_bytes=self.output_bytes),
        )
        started = time.monotonic()
        result = await asyncio.get_running_loop().run_in_executor(self._executor, self.sandbox.run, request)
        latency = time.monotonic() - started
        if result.stopped_by == "exit":
            with self._lock:
                if self._sessions.get(session) is state:
                    state.cells.append(code)
        status, text = self._render(result, budget_s)
        return ToolResult(
            text, status, latency, f"{result.stopped_by} exit={result.exit_code} {result.detail}"
        )

    def _render(self, r: RunResult, wall_s: float) -> tuple[ToolStatus, str]:
        out = (r.stdout + r.stderr).decode(errors="replace")
        if r.stopped_by == "sandbox_error":
            return "infra_error", "Error: the sandbox failed (not your code's fault)"
        if r.stopped_by == "timeout":
            return "timeout", self._clip(
                out
            ) + f"\nError: the code ran longer than {wall_s:.1f} s and was stopped"
        if r.stopped_by == "memory":
            return "error", self._clip(
                out
            ) + f"\nError: the code used more than {self.memory_mb} MB and was stopped"
        if r.stopped_by == "output_limit":
            return "error", self._clip(out) + "\nError: the code printed too much output and was stopped"
        return ("ok" if r.exit_code == 0 else "error"), self._clip(out)

    def _clip(self, text: str) -> str:
        n = self.max_output_chars
        if len(text) <= n:
            return text
        return f"{text[: n // 2]}\n... [{len(text) - n} characters cut] ...\n{text[-n // 2 :]}"

    def end_session(self, session: str) -> None:
        """Forget the trajectory; its sandbox is cleaned and freed on a worker thread (a few ms, off the loop)."""
        with self._lock:
            state = self._sessions.pop(session, None)
        if state is not None:
            self._executor.submit(self.sandbox.end_session, state.key)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._owns_sandbox:
            self.sandbox.close()


TOOLS.register("python")(PythonTool)
