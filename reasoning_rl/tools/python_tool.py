"""``python``: runs a cell of model-written code in the sandbox, REPL-style; state persists across the calls of
one trajectory and nothing is shared between trajectories.

Semantics (a live interpreter per trajectory). A trajectory's calls go to one warm sandbox it holds
(``RunRequest.session``) whose fork server keeps a python child alive between cells: variables, imports and
files of earlier cells are there, and a value the model saw (``time``, ``random``, ``os.urandom``, ``uuid``, a
temporary file's name, a file read) is the value the next cell sees, as in a real REPL. The sandbox's zygote (a
clean interpreter forked when the sandbox starts, before any request) imports sympy, numpy and mpmath once
(``SCI_IMAGE``, ``SCI_PRELOAD``) and forks each trajectory's child from itself, so ``import sympy`` in a cell
costs nothing and no child's memory holds anything of an earlier trajectory. Nothing a call starts outlives it:
at its end every other process is killed and the interpreter stopped until the next call; ``session_cpu_s``
bounds the interpreter's CPU over the trajectory. ``end_session`` gives the sandbox back: the supervisor ends
the child, kills every process and wipes files and IPC before any other trajectory gets it.

Held interpreters are bounded (``pool_size``): a further trajectory waits (``Slots``) until one ends; a live
one is never taken back. A new interpreter (first call; after one ended; after its sandbox failed) is set up
off the call's clock: preload, then the trajectory's recorded cells replayed silently (``ReplCell.history``;
``random`` and ``numpy.random`` are seeded when an interpreter starts, so a replay recomputes those; clocks and
``os.urandom`` it cannot). Only cells that ran to their end (``ok``/``error``) are recorded: one that timed out,
hit a limit or ended its interpreter (``died``) never is. Each cell, a replayed one too, gets ``budget_s``.

Outcomes (README "Tool-call outcomes"): whatever comes out of a sandbox that ran the trajectory's code is that
code's outcome; ``infra_error`` only when the sandbox failed before any of its code ran. After that, a sandbox
failure is retried once in a fresh sandbox, then graded as the call's error.

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
from dataclasses import dataclass, field, replace
from typing import Any

from reasoning_rl.registry import TOOLS
from reasoning_rl.tools.base import ToolResult, ToolStatus
from reasoning_rl.tools.slots import Slots
from sandboxes import Limits, RunRequest, RunResult, Sandbox, open_sandbox
from sandboxes.image import SCI_IMAGE, SCI_PRELOAD
from sandboxes.types import ReplCell


@dataclass
class _Session:
    """A trajectory's cells so far that ran to their end (replayed only into a new interpreter; a cell that
    ended its interpreter, or was stopped by a limit, is never among them), its sandbox session's key (unique
    per trajectory life, so a name reused after ``end_session`` never meets the old state) and whether any of
    its code ran yet (a sandbox failure after that is retried once, then graded)."""

    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    cells: list[str] = field(default_factory=list)
    ran: bool = False


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
        session_cpu_s: float = 120.0,
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
        self.preload, self.session_cpu_s = tuple(preload), session_cpu_s
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._slots = Slots(pool_size)
        self._executor = ThreadPoolExecutor(max(pool_size, 1), thread_name_prefix="python-tool")

    async def call(self, arguments: dict[str, Any], *, session: str, budget_s: float) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult("Error: the python tool needs a string argument 'code'", "invalid_call")
        await self._slots.enter(session)  # a live interpreter per trajectory in flight: wait for one
        started = time.monotonic()  # the call's latency, not its wait for an interpreter
        with self._lock:
            state = self._sessions.setdefault(session, _Session())
        result = await self._run(state, code, budget_s)
        if result.stopped_by == "sandbox_error" and state.ran:
            # after the session's own code ran, a sandbox failure may be that code's doing: once more in a
            # fresh sandbox (its cells replayed); a second one is graded as the call's error, never masked
            result = await self._run(state, code, budget_s)
            if result.stopped_by == "sandbox_error":
                result = replace(result, stopped_by="exit", cell="died")
        latency = time.monotonic() - started
        with self._lock:
            state.ran = state.ran or result.stopped_by != "sandbox_error"
            if result.cell in ("ok", "error") and self._sessions.get(session) is state:
                state.cells.append(code)
        status, text = self._render(result, budget_s)
        return ToolResult(
            text,
            status,
            latency,
            f"{result.stopped_by} exit={result.exit_code} {result.cell} {result.detail}",
        )

    async def _run(self, state: _Session, code: str, budget_s: float) -> RunResult:
        with self._lock:
            history = tuple(state.cells)
        repl = ReplCell(
            code,
            history,
            self.preload,
            cell_s=budget_s,
            address_space_mb=self.memory_mb,
            cpu_s=self.session_cpu_s,
        )
        request = RunRequest(
            [],
            repl=repl,
            session=state.key,
            env={"PYTHONHASHSEED": "0"},
            # each cell (a replayed one too) has budget_s; a new interpreter is set up off this clock
            limits=Limits(
                wall_s=budget_s * (len(history) + 1), memory_mb=self.memory_mb, output_bytes=self.output_bytes
            ),
        )
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.sandbox.run, request)

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
        if r.cell == "ok" and r.exit_code == 0:
            return "ok", self._clip(out)
        if r.cell in ("ok", "error"):
            return "error", self._clip(out)
        return "error", self._clip(out) + "\nError: the interpreter ended; the next call starts a new one"

    def _clip(self, text: str) -> str:
        n = self.max_output_chars
        if len(text) <= n:
            return text
        return f"{text[: n // 2]}\n... [{len(text) - n} characters cut] ...\n{text[-n // 2 :]}"

    def end_session(self, session: str) -> None:
        """Forget the trajectory; its sandbox is cleaned and freed on a worker thread (a few ms, off the loop),
        and only then is its interpreter's slot handed to a waiting trajectory."""
        with self._lock:
            state = self._sessions.pop(session, None)
        if state is None:
            self._slots.leave(session)
            return
        future = self._executor.submit(self.sandbox.end_session, state.key)
        future.add_done_callback(lambda _: self._slots.leave(session))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._owns_sandbox:
            self.sandbox.close()


TOOLS.register("python")(PythonTool)
