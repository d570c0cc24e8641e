"""Tools by name, through the shared ``reasoning_rl.registry.TOOLS`` registry: built-ins, in-process
registrations and plugins of the ``reasoning_rl.tools`` entry-point group (as engines and estimators), or as
``module:attr`` from an importable module (as graders' ``module:Class``)."""

from __future__ import annotations

import importlib
from typing import Any

from reasoning_rl.registry import TOOLS, is_tool_spec
from reasoning_rl.tools.base import Tool, schema

ENTRY_POINT_GROUP = TOOLS.group


class UnknownToolError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def available() -> list[str]:
    return TOOLS.names()


def register(t: Tool, *, replace: bool = False) -> Tool:
    """Register an instance in-process (tests, notebooks); plugins should use the entry point."""
    if not isinstance(t, Tool):
        raise TypeError(f"{t!r} does not implement the Tool protocol (name, description, parameters, call)")
    if t.name in TOOLS.names() and not replace:
        raise ValueError(f"tool {t.name!r} is already registered; pass replace=True to override")
    return TOOLS.register(t.name)(t)


def unregister(name: str) -> None:
    TOOLS.unregister(name)


def _load(name: str) -> Any:
    if not is_tool_spec(name):
        try:
            TOOLS.check(name)
        except ValueError as exc:
            raise UnknownToolError(str(exc)) from None
        return TOOLS.get(name)
    module, _, attr = name.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise UnknownToolError(f"cannot load tool spec {name!r}: {type(exc).__name__}: {exc}") from None


def make(name: str, **options: Any) -> Tool:
    """A tool instance. A name (or ``module:attr``) gives a ``Tool`` instance, or a class/factory called with
    ``options``."""
    obj: Any = _load(name)
    if not isinstance(obj, type) and isinstance(obj, Tool):
        if options:
            raise ValueError(f"tool {name!r} takes no options, got {sorted(options)}")
        return obj
    made = obj(**options)
    if not isinstance(made, Tool):
        raise TypeError(f"tool {name!r} -> {obj!r} did not make a Tool")
    return made


def describe(name: str) -> dict[str, Any]:
    """The tool's function schema (``schema``) read from its implementation, without making an instance (the
    python tool's would open a sandbox pool): what a chat template lists in the system prompt."""
    obj: Any = _load(name)
    if not all(isinstance(getattr(obj, a, None), str | dict) for a in ("name", "description", "parameters")):
        raise UnknownToolError(f"tool {name!r}: {obj!r} has no name, description and parameters to list")
    return schema(obj)
