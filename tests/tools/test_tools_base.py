"""The Tool contract, the function decorator, the registry (entry points) and the calculator."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from reasoning_rl import tools
from reasoning_rl.tools import Tool, ToolResult, schema, tool
from reasoning_rl.tools.calculator import calculator, evaluate


def _call(t: Tool, args: dict[str, Any], budget_s: float = 5.0) -> ToolResult:
    return asyncio.run(t.call(args, session="s", budget_s=budget_s))


@tool(description="Add two integers.")
def add(a: int, b: int = 1) -> int:
    return a + b


def test_decorator_builds_a_schema_and_calls_the_function() -> None:
    assert isinstance(add, Tool)
    assert schema(add) == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a"],
            },
        },
    }
    r = _call(add, {"a": 2, "b": 3})
    assert (r.text, r.status) == ("5", "ok") and _call(add, {"a": 2}).text == "3"
    bad = _call(add, {"c": 1})
    assert bad.status == "invalid_call" and "bad arguments for add" in bad.text


def test_function_tool_failures_are_results_not_exceptions() -> None:
    release = threading.Event()

    @tool()
    def boom() -> str:
        raise RuntimeError("nope")

    @tool()
    def slow() -> str:
        release.wait(60)  # returns when the test says so (an event), never before its budget ran out
        return "late"

    async def timed_out() -> ToolResult:
        result = await slow.call({}, session="s", budget_s=0.1)
        release.set()  # let the abandoned thread end (asyncio.run waits for it)
        return result

    assert _call(boom, {}).status == "error" and "RuntimeError: nope" in _call(boom, {}).text
    r = asyncio.run(timed_out())
    assert r.status == "timeout" and "timed out" in r.text


@tool(isolated=True)
def hog(kind: str) -> str:
    """Raises, or allocates past the worker's address-space cap (module-level: isolated tools are imported)."""
    if kind == "raise":
        raise ValueError("bad input")
    return str(len(bytearray(4 << 30)))


def test_an_isolated_tool_reports_its_failures_and_its_memory_bomb() -> None:
    """The killable worker (the grading runtime's HelperPool) returns the function's exception and its memory
    fault as the call's error, and keeps serving."""
    raised = _call(hog, {"kind": "raise"}, budget_s=30)
    assert (raised.status, raised.text) == ("error", "Error: ValueError: bad input")
    bomb = _call(hog, {"kind": "bomb"}, budget_s=30)
    assert bomb.status == "error" and "MemoryError" in bomb.text, bomb


def test_decorator_rejects_unsupported_parameter_types() -> None:
    with pytest.raises(TypeError, match="parameter 'x' has type"):

        @tool()
        def f(x: list) -> str:  # type: ignore[type-arg]
            return ""


def test_registry_resolves_builtins_entry_points_and_registered_tools() -> None:
    from reasoning_rl.registry import TOOLS

    assert {"python", "calculator"} <= set(tools.available()) == set(TOOLS.names())
    assert tools.make("calculator") is calculator
    with pytest.raises(
        tools.UnknownToolError, match="unknown tool 'nope': expected one of 'calculator', 'python'"
    ):
        tools.make("nope")
    with pytest.raises(ValueError, match="takes no options"):
        tools.make("calculator", x=1)
    tools.register(add)
    try:
        assert tools.make("add") is add and "add" in tools.available()
        with pytest.raises(ValueError, match="already registered"):
            tools.register(add)
    finally:
        tools.unregister("add")
    with pytest.raises(TypeError, match="does not implement the Tool protocol"):
        tools.register(object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("2^10 - sqrt(16)", "1020"),
        ("1/3 + 1/6", "1/2 ≈ 0.500000000000000"),
        ("factor(x^2 - 1)", "(x - 1)*(x + 1)"),
        ("10!", "3628800"),
        ("solve(x^2 - 4, x)", "[-2, 2]"),
        ("7 % 3", "1"),
        ("2 x + 3 x", "5*x"),
    ],
)
def test_calculator_values(expr: str, value: str) -> None:
    assert evaluate(expr) == value
    assert _call(calculator, {"expression": expr}).text == value


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("__import__('os').system('id')", "only numbers"),
        ("(1).__class__", "only numbers"),
        ("x.real", "only numbers"),
        ("open(1)", "unknown name"),
        ("9^9^9", "exponent too large"),
        ("2**(10**6)", "exponent too large"),
        ("(10**5)!", "factorial argument"),
        ("factorial(10000000)", "factorial argument"),
        ("10000000!", "factorial"),
        ("binomial(10**9, 10**8)", "binomial argument"),
        ("integrate(x, x)", "unknown name"),
        ("1" * 600, "longer than"),
        ("", "empty"),
    ],
)
def test_calculator_refuses_unsafe_or_unbounded_input(expr: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        evaluate(expr)
    r = _call(calculator, {"expression": expr})
    assert r.status == "error" and why in r.text


# the hostile call's budget: ~100x what a warm worker takes to answer "2 + 2", so the concurrent call answers
# inside it however loaded the machine is (the order of the two answers is the assertion, not a duration)
HOSTILE_BUDGET_S = 5.0


@pytest.mark.slow
def test_a_calculator_call_past_its_budget_is_stopped_and_stalls_no_other_call() -> None:
    """Nested powers pass the size screen and take minutes in C (holding the GIL on a thread): the call must be
    a ``timeout`` at its budget, the event loop must keep running meanwhile, and a concurrent call must answer."""
    hostile = {"expression": "(10^9999)^9999"}

    async def scenario() -> tuple[ToolResult, ToolResult, bool, ToolResult]:
        await asyncio.gather(
            *(calculator.call({"expression": "1"}, session="w", budget_s=60) for _ in range(2))
        )
        slow = asyncio.create_task(calculator.call(hostile, session="h", budget_s=HOSTILE_BUDGET_S))
        await asyncio.sleep(0)  # one event-loop turn: the hostile call's thread is submitted first
        quick = await calculator.call({"expression": "2 + 2"}, session="q", budget_s=60)
        answered_meanwhile = not slow.done()  # the loop ran and served it while the hostile call was held
        stopped = await slow
        after = await calculator.call({"expression": "3 * 3"}, session="a", budget_s=60)
        return stopped, quick, answered_meanwhile, after

    stopped, quick, answered_meanwhile, after = asyncio.run(scenario())
    assert stopped.status == "timeout" and stopped.latency_s < 60, stopped  # a hang guard: minutes otherwise
    assert (quick.status, quick.text) == ("ok", "4") and answered_meanwhile, quick
    assert (after.status, after.text) == ("ok", "9")  # a fresh worker replaced the killed one


def test_arguments_of_the_wrong_json_type_are_an_invalid_call() -> None:
    """The model's JSON is untrusted: a string parameter given an object (or an int given a string) is refused
    before the function runs."""
    r = _call(calculator, {"expression": {"nested": [1, 2]}})
    assert r.status == "invalid_call" and "expression must be a string" in r.text
    assert (
        _call(add, {"a": "2"}).status == "invalid_call" and _call(add, {"a": True}).status == "invalid_call"
    )
