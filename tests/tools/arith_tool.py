"""A deterministic stand-in for the python tool (``rollout.tools: [arith_tool:ArithTool]``), named ``python`` so
the scripted TIR engine's calls reach it: it evaluates ``print(EXPR)`` for integer arithmetic with no sandbox,
so tool runs in CI are exact and Docker-free. Its latency is reported as 0 (recorded results compare exactly)."""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

from reasoning_rl.tools.base import ToolResult

_PRINT = re.compile(r"^print\((.*)\)$", re.DOTALL)
_OPS: dict[type[ast.operator], Any] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return int(_OPS[type(node.op)](_value(node.left), _value(node.right)))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    raise ValueError("only integer + - * is supported")


class ArithTool:
    name = "python"
    description = "Evaluate print(<integer arithmetic>) and return what it prints."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"code": {"type": "string"}},
        "required": ["code"],
    }

    async def call(self, arguments: dict[str, Any], *, session: str, budget_s: float) -> ToolResult:
        match = _PRINT.match(str(arguments.get("code", "")).strip())
        try:
            if match is None:
                raise ValueError("expected print(EXPR)")
            return ToolResult(f"{_value(ast.parse(match.group(1), mode='eval').body)}\n", "ok", 0.0)
        except (SyntaxError, ValueError) as exc:
            return ToolResult(f"Error: {exc}", "error", 0.0)

    def end_session(self, session: str) -> None:
        """Stateless: nothing to free."""
