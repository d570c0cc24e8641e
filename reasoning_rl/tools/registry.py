"""Tools by name: built-ins and plugins through the ``reasoning_rl.tools`` entry-point group (as graders do)."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from reasoning_rl.tools.base import Tool

ENTRY_POINT_GROUP = "reasoning_rl.tools"
# Built-ins resolve from a source checkout without entry-point metadata too.
BUILTIN: dict[str, str] = {
    "python": "reasoning_rl.tools.python_tool:PythonTool",
    "calculator": "reasoning_rl.tools.calculator:calculator",
}
_registered: dict[str, Tool] = {}


class UnknownToolError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def _targets() -> dict[str, str]:
    targets = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        targets[ep.name] = ep.value
    return targets


def available() -> list[str]:
    return sorted(set(_targets()) | set(_registered))


def register(t: Tool, *, replace: bool = False) -> Tool:
    """Register an instance in-process (tests, notebooks); plugins should use the entry point."""
    if not isinstance(t, Tool):
        raise TypeError(f"{t!r} does not implement the Tool protocol (name, description, parameters, call)")
    if t.name in _registered and not replace:
        raise ValueError(f"tool {t.name!r} is already registered; pass replace=True to override")
    _registered[t.name] = t
    return t


def unregister(name: str) -> None:
    _registered.pop(name, None)


def make(name: str, **options: Any) -> Tool:
    """A tool instance. Entry points name a ``Tool`` class/factory (called with ``options``) or an instance."""
    if name in _registered:
        if options:
            raise ValueError(
                f"tool {name!r} is a registered instance; it takes no options, got {sorted(options)}"
            )
        return _registered[name]
    targets = _targets()
    if name not in targets:
        raise UnknownToolError(f"unknown tool {name!r}; available: {', '.join(available())}")
    module_name, _, attr = targets[name].partition(":")
    obj: Any = getattr(importlib.import_module(module_name), attr)
    if not isinstance(obj, type) and isinstance(obj, Tool):
        if options:
            raise ValueError(f"tool {name!r} takes no options, got {sorted(options)}")
        return obj
    made = obj(**options)
    if not isinstance(made, Tool):
        raise TypeError(f"entry point {name!r} -> {targets[name]} did not make a Tool")
    return made
