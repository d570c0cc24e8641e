"""The tool contract: a name, a JSON schema for its arguments, and an async call with a time budget whose result
is text for the model plus a status the rollout counts. ``infra_error`` is our infrastructure failing (the sample
is marked ``error``, masked): only for what the model's arguments or code cannot cause (README, "Tool-call
outcomes"); every other non-``ok`` status is the model's call going wrong and is shown to the model."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from reasoning_rl.tools.isolated import ProcessRunner

ToolStatus = Literal["ok", "error", "timeout", "invalid_call", "infra_error"]
_JSON_TYPES: dict[Any, str] = {int: "integer", float: "number", str: "string", bool: "boolean"}


@dataclass(frozen=True, slots=True)
class ToolResult:
    """``text`` goes back to the model; ``detail`` is for logs only."""

    text: str
    status: ToolStatus
    latency_s: float = 0.0
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, slots=True)
class ToolTurn:
    """One tool call and what came back (``result.text`` is what the model saw); ``started``: wall clock."""

    name: str
    arguments: dict[str, Any]
    result: ToolResult
    started: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The turn as a samples-file row field."""
        r = self.result
        return {
            "tool": self.name,
            "arguments": self.arguments,
            "status": r.status,
            "output": r.text,
            "latency_s": round(r.latency_s, 4),
        }


@runtime_checkable
class Tool(Protocol):
    """``session`` names the trajectory: stateful tools keep per-session state until ``end_session``."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object

    async def call(self, arguments: dict[str, Any], *, session: str, budget_s: float) -> ToolResult: ...

    def end_session(self, session: str) -> None: ...


def schema(tool: Tool) -> dict[str, Any]:
    """The OpenAI/Hermes function schema chat templates render into the system prompt."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


class FunctionTool:
    """A plain Python function as a stateless tool. By default it runs on a worker thread: a call past its
    budget is reported as ``timeout`` but the thread cannot be killed (and C-level work holds the GIL), so such a
    function must be trusted and quick. ``isolated=True`` runs it in killable worker processes instead
    (``tools/isolated.py``): the budget then holds for every input, as a tool whose work depends on the model's
    arguments needs (the ``calculator``); the function must be module-level. Untrusted code belongs in the
    sandbox, as the ``python`` tool does."""

    def __init__(
        self, fn: Callable[..., Any], name: str, description: str, *, isolated: bool = False
    ) -> None:
        self.fn, self.name, self.description = fn, name, description
        self._signature = inspect.signature(fn)
        self.parameters = _parameters(self._signature, name)
        self._runner = ProcessRunner(fn) if isolated else None

    async def call(self, arguments: dict[str, Any], *, session: str, budget_s: float) -> ToolResult:
        started = time.monotonic()
        try:
            bound = self._signature.bind(**arguments)
        except TypeError as exc:
            return ToolResult(f"Error: bad arguments for {self.name}: {exc}", "invalid_call", 0.0)
        wrong = _wrong_types(bound.arguments, self.parameters)
        if wrong:
            return ToolResult(f"Error: bad arguments for {self.name}: {wrong}", "invalid_call", 0.0)
        if self._runner is not None:
            status, text = await self._runner.call(bound.args, bound.kwargs, budget_s)
            latency = time.monotonic() - started
            if status == "ok":
                return ToolResult(text, "ok", latency)
            if status == "timeout":
                return ToolResult(f"Error: {self.name} timed out after {budget_s:g} s", "timeout", latency)
            return ToolResult(f"Error: {text}", "error", latency)
        try:
            value = await asyncio.wait_for(asyncio.to_thread(self.fn, *bound.args, **bound.kwargs), budget_s)
        except TimeoutError:
            return ToolResult(
                f"Error: {self.name} timed out after {budget_s:g} s", "timeout", time.monotonic() - started
            )
        except Exception as exc:  # noqa: BLE001 - the tool's failure is shown to the model and counted
            return ToolResult(f"Error: {type(exc).__name__}: {exc}", "error", time.monotonic() - started)
        return ToolResult(str(value), "ok", time.monotonic() - started)

    def end_session(self, session: str) -> None:
        """Stateless: nothing to free."""


def _wrong_types(arguments: dict[str, Any], parameters: dict[str, Any]) -> str:
    """Which arguments do not have their schema's JSON type (the model's JSON is untrusted); '' when all do."""
    checks: dict[str, Callable[[Any], bool]] = {
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
    }
    props = parameters.get("properties", {})
    bad = [
        f"{k} must be a {props[k]['type']}"
        for k, v in arguments.items()
        if k in props and not checks[props[k]["type"]](v)
    ]
    return "; ".join(bad)


def _parameters(sig: inspect.Signature, name: str) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    for p in sig.parameters.values():
        annotation = p.annotation if p.annotation is not inspect.Parameter.empty else str
        if isinstance(annotation, str):  # postponed annotations: only the builtin scalar names are supported
            annotation = {"int": int, "float": float, "str": str, "bool": bool}.get(annotation, annotation)
        if annotation not in _JSON_TYPES:
            raise TypeError(
                f"tool {name!r}: parameter {p.name!r} has type {annotation!r}; use int/float/str/bool"
            )
        props[p.name] = {"type": _JSON_TYPES[annotation]}
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    return {"type": "object", "properties": props, "required": required}


def tool(
    name: str | None = None, description: str | None = None, *, isolated: bool = False
) -> Callable[[Callable[..., Any]], FunctionTool]:
    """Decorator: ``@tool()`` turns ``def f(x: int) -> str`` into a ``Tool`` named ``f`` (docstring = description);
    ``isolated=True``: calls run in killable processes (see ``FunctionTool``)."""

    def deco(fn: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            fn, name or fn.__name__, description or inspect.getdoc(fn) or "", isolated=isolated
        )

    return deco
