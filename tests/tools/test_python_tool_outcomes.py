"""Issue 41, the python tool's side, with a scripted sandbox (no Docker): a sandbox failure before any of a
trajectory's code ran is infrastructure (masked), one after it is retried once in a fresh sandbox and then
graded; a died cell is never replayed; and trajectories beyond the pool queue for an interpreter (``Slots``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from reasoning_rl.tools.python_tool import PythonTool
from reasoning_rl.tools.slots import Slots
from sandboxes import RunRequest, RunResult

OK = RunResult(b"1\n", b"", 0, 0.0, "exit", cell="ok")
DIED = RunResult(b"", b"", 0, 0.0, "exit", cell="died")
BROKEN = RunResult(b"", b"", None, 0.0, "sandbox_error", "container died")


class _Scripted:
    """Answers runs from a script, recording each request."""

    name, isolation = "scripted", "strong"

    def __init__(self, script: list[RunResult]) -> None:
        self.script, self.requests = list(script), []  # type: list[RunResult], list[RunRequest]

    def run(self, request: RunRequest) -> RunResult:
        self.requests.append(request)
        return self.script.pop(0)

    def end_session(self, session: str) -> None:
        """Nothing held."""

    def close(self) -> None:
        """Nothing held."""


@pytest.fixture
def scripted() -> Iterator[tuple[PythonTool, _Scripted]]:
    sandbox = _Scripted([])
    tool = PythonTool(sandbox, pool_size=1)  # type: ignore[arg-type]
    yield tool, sandbox
    tool.close()


def _call(tool: PythonTool, code: str, session: str = "s") -> Any:
    return asyncio.run(tool.call({"code": code}, session=session, budget_s=5.0))


def test_a_sandbox_failure_before_any_code_ran_is_infrastructure(scripted: Any) -> None:
    tool, sandbox = scripted
    sandbox.script = [BROKEN]
    assert _call(tool, "1").status == "infra_error" and len(sandbox.requests) == 1


def test_a_sandbox_failure_after_the_trajectorys_code_ran_is_retried_then_graded(scripted: Any) -> None:
    tool, sandbox = scripted
    sandbox.script = [OK, BROKEN, OK, BROKEN, BROKEN]
    assert _call(tool, "a = 1").ok
    retried = _call(tool, "b = 2")  # once more, transparently, in a fresh sandbox
    assert retried.ok and len(sandbox.requests) == 3
    kept = _call(tool, "c = 3")  # it keeps failing: the call is graded, the trajectory not masked
    assert kept.status == "error" and "interpreter ended" in kept.text
    assert sandbox.requests[-1].repl is not None and sandbox.requests[-1].repl.history == ("a = 1", "b = 2")


def test_a_died_cell_is_not_replayed_and_later_cells_are(scripted: Any) -> None:
    tool, sandbox = scripted
    sandbox.script = [OK, DIED, OK]
    assert _call(tool, "x = 1").ok
    died = _call(tool, "import os; os._exit(0)")
    assert died.status == "error" and "interpreter ended" in died.text
    _call(tool, "x")
    assert sandbox.requests[-1].repl is not None and sandbox.requests[-1].repl.history == ("x = 1",)


def test_slots_queue_first_come_first_served_and_survive_cancellation() -> None:
    slots = Slots(1)

    async def scenario() -> list[str]:
        order: list[str] = []
        await slots.enter("a")
        await slots.enter("a")  # a holder enters again at once

        async def wait(session: str) -> None:
            await slots.enter(session)
            order.append(session)

        b, c, d = (asyncio.create_task(wait(s)) for s in "bcd")
        await asyncio.sleep(0)  # let the three queue (an event-loop turn, not a wait for time)
        c.cancel()
        slots.leave("a")
        await b
        assert not d.done()
        slots.leave("b")
        await d
        slots.leave("d")
        return order

    assert asyncio.run(scenario()) == ["b", "d"]
    assert not slots.holds("c")


def test_a_waiter_whose_loop_ended_never_holds_a_slot() -> None:
    slots = Slots(1)
    asyncio.run(slots.enter("holder"))

    async def abandon() -> None:
        task = asyncio.create_task(slots.enter("gone"))
        await asyncio.sleep(0)
        task.cancel()

    asyncio.run(abandon())
    slots.leave("holder")
    asyncio.run(slots.enter("next"))  # the slot was freed, not handed to the closed loop
    assert slots.holds("next") and not slots.holds("gone")
