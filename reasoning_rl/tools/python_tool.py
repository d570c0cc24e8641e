"""``python``: runs a cell of model-written code in the sandbox; state persists across the calls of one
trajectory and nothing is shared between trajectories.

Semantics (replay). Each call sends the trajectory's earlier cells plus the new one to a warm sandbox, which
re-runs the earlier cells with their output discarded and then runs the new cell with its output shown (a trailing
expression's value is printed, as in a REPL). So variables, functions, imports and files written by earlier cells
are there again; ``random`` is seeded at the start (when a cell mentions it), so replays recompute the same values. The sandbox's supervisor
kills every process and wipes the scratch dirs after each run, so no variable, file or background process can reach
another trajectory (or outlive the call: a background process does not survive between calls). Cells that ran out
of time, memory or output are not replayed; cells that raised are (their side effects before the error count).
Each call's wall limit is ``budget_s`` plus the recorded time of the replayed cells (capped at 4 x ``budget_s``).

Why replay, not a persistent interpreter per trajectory: the warm pool's supervisor resets the sandbox after every
run, which is what keeps trajectories from seeing each other; a persistent interpreter needs a sandbox held per
trajectory for its whole life (256 containers for 256 trajectories in flight) or a new supervisor mode. Measured
with ``bench/tool_calls.py`` on this 2-core machine (shared, load average 17-31, so absolute numbers are
pessimistic; bench/RESULTS.md#tool-calls), Docker, pool of 4:
- warm, one call at a time: p50 79-104 ms per call, about one bare interpreter start (74-113 ms in the same runs);
  the sandbox round trip itself is 2-3 ms. The second call of a trajectory (which replays the first cell) costs
  the same within the noise.
- warm, 256 trajectories x 2 calls in flight: 9.3-11.8 calls/s (the 2 cores bound it; latency is queueing).
- cold (one container per call, what a held-per-trajectory sandbox costs to start): 1.1-2.3 s per call, so
  starting 256 per-trajectory sandboxes alone would take minutes per batch.
Replay's cost grows with the number of earlier cells (bounded by ``max_turns``) and their run time.

Limits are the code grader's defaults: 512 MB memory (also as an address-space cap inside, so a memory bomb is a
fast ``MemoryError``), 64 processes, 1 CPU, 1 MiB output per stream, no network; the model sees at most
``max_output_chars`` of the output (head and tail). The sandbox image has the standard library only (no numpy/sympy).
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reasoning_rl.registry import TOOLS
from reasoning_rl.tools.base import ToolResult, ToolStatus
from sandboxes import Limits, RunRequest, RunResult, Sandbox, open_sandbox

_RUNNER = (Path(__file__).parent / "_replay.py").read_text()
_REPLAYED = ("exit",)  # stopped_by values whose cells are replayed later


@dataclass
class _Session:
    cells: list[str] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)


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
    ) -> None:
        if isinstance(sandbox, str):
            sandbox = (
                open_sandbox(sandbox, pool_size=pool_size) if sandbox != "local" else open_sandbox("local")
            )
            self._owns_sandbox = True
        else:
            self._owns_sandbox = False
        self.sandbox = sandbox
        self.memory_mb, self.output_bytes, self.max_output_chars = memory_mb, output_bytes, max_output_chars
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max(pool_size, 1), thread_name_prefix="python-tool")

    async def call(self, arguments: dict[str, Any], *, session: str, budget_s: float) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult("Error: the python tool needs a string argument 'code'", "invalid_call")
        with self._lock:
            state = self._sessions.setdefault(session, _Session())
            cells, walls = list(state.cells), list(state.wall_s)
        wall = min(budget_s + sum(walls), 4 * budget_s)
        all_cells = [*cells, code]
        request = RunRequest(
            ["python3", "-I", "-S", "runner.py", str(self.memory_mb), str(len(all_cells))],
            files={"runner.py": _RUNNER, **{f"cell_{k}": src for k, src in enumerate(all_cells)}},
            env={"PYTHONHASHSEED": "0"},
            limits=Limits(wall_s=wall, memory_mb=self.memory_mb, output_bytes=self.output_bytes),
        )
        started = time.monotonic()
        result = await asyncio.get_running_loop().run_in_executor(self._executor, self.sandbox.run, request)
        latency = time.monotonic() - started
        if result.stopped_by in _REPLAYED:
            with self._lock:
                state = self._sessions.setdefault(session, _Session())
                state.cells.append(code)
                state.wall_s.append(result.wall_s)
        status, text = self._render(result, wall)
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
        with self._lock:
            self._sessions.pop(session, None)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._owns_sandbox:
            self.sandbox.close()


TOOLS.register("python")(PythonTool)
