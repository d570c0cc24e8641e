"""Tools the model can call during a rollout (``python`` in the sandbox, ``calculator``, plugins)."""

from reasoning_rl.tools.base import FunctionTool, Tool, ToolResult, ToolStatus, schema, tool
from reasoning_rl.tools.registry import (
    ENTRY_POINT_GROUP,
    UnknownToolError,
    available,
    make,
    register,
    unregister,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "FunctionTool",
    "Tool",
    "ToolResult",
    "ToolStatus",
    "UnknownToolError",
    "available",
    "make",
    "register",
    "schema",
    "tool",
    "unregister",
]
