"""``calculator``: evaluates one arithmetic/symbolic expression with SymPy (no sandbox: a killable worker process).

SymPy's parser is built on ``eval``, so the input is screened first: a length cap, a character allow-list, only
allow-listed names (functions, constants, single-letter symbols), no attribute access and no huge powers,
factorials or binomials. The screen is a fast path, not the bound: nested powers, ``solve``/``simplify`` on a
hostile input and the like still pass it, so the tool runs in killable worker processes (``isolated=True``) and
its budget holds for every input, without stalling the other trajectories' rollouts (unbounded symbolic work such
as ``integrate`` is not offered)."""

from __future__ import annotations

import re
from typing import Any

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from reasoning_rl.registry import TOOLS
from reasoning_rl.tools.base import FunctionTool

MAX_CHARS = 500
MAX_EXPONENT = 10_000
_FUNCTIONS = (
    "sqrt",
    "cbrt",
    "root",
    "exp",
    "log",
    "ln",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "factorial",
    "binomial",
    "gcd",
    "lcm",
    "floor",
    "ceiling",
    "Abs",
    "Rational",
    "simplify",
    "expand",
    "factor",
    "diff",
    "solve",
    "oo",
    "pi",
    "E",
    "I",
    "Integer",
    "Float",
    "Symbol",
    "mod",
)
_NAMES: dict[str, Any] = {n: getattr(sympy, n) for n in _FUNCTIONS if hasattr(sympy, n)}


def _bounded(fn: Any) -> Any:
    """``fn`` refusing numeric arguments above ``MAX_EXPONENT``: called while parsing, before any size check."""

    def call(*args: Any) -> Any:
        for a in args:
            value = sympy.sympify(a)
            if value.is_number and abs(sympy.N(value, 5)) > MAX_EXPONENT:
                raise ValueError(f"{fn.__name__} argument larger than {MAX_EXPONENT}")
        return fn(*args)

    return call


_NAMES.update(
    ln=sympy.log,
    mod=sympy.Mod,
    abs=sympy.Abs,
    factorial=_bounded(sympy.factorial),
    binomial=_bounded(sympy.binomial),
)
# What ``parse_expr(evaluate=False)`` emits; not user-visible names (the screen allows only ``_NAMES``).
_PARSER_NAMES: dict[str, Any] = {
    n: getattr(sympy, n)
    for n in ("Add", "Mul", "Pow", "Integer", "Float", "Rational", "Symbol", "Function", "Mod")
}
_ALLOWED = re.compile(r"^[0-9A-Za-z\s+\-*/^().,=<>!%]*$")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TRANSFORMS = (*standard_transformations, implicit_multiplication_application, convert_xor)


def evaluate(expression: str) -> str:
    """The value (exact, plus a 15-digit decimal when it differs), or a ``ValueError`` saying what is refused."""
    expr = _screen(expression)
    names: dict[str, Any] = {"__builtins__": {}, **_PARSER_NAMES, **_NAMES}
    names.update({s: sympy.Symbol(s) for s in _IDENT.findall(expr) if len(s) == 1 and s not in names})
    parsed = parse_expr(expr, local_dict={}, global_dict=names, transformations=_TRANSFORMS, evaluate=False)
    _check_sizes(parsed)
    value = parsed.doit() if isinstance(parsed, sympy.Basic) else parsed
    if isinstance(value, sympy.Expr) and value.is_number and not value.is_Integer:
        approx = sympy.N(value, 15)
        return f"{value} ≈ {approx}" if str(approx) != str(value) else str(value)
    return str(value)


def _screen(expression: str) -> str:
    expr = expression.strip()
    if not expr:
        raise ValueError("empty expression")
    if len(expr) > MAX_CHARS:
        raise ValueError(f"expression longer than {MAX_CHARS} characters")
    if not _ALLOWED.match(expr) or "__" in expr or re.search(r"[A-Za-z_)\]]\s*\.", expr):
        raise ValueError("only numbers, operators, parentheses and math function names are allowed")
    unknown = sorted({s for s in _IDENT.findall(expr) if len(s) > 1 and s not in _NAMES})
    if unknown:
        raise ValueError(f"unknown name(s) {unknown}; allowed: {', '.join(sorted(_NAMES))}")
    return expr


def _check_sizes(expr: Any) -> None:
    """Refuse what would take unbounded time before evaluating anything."""
    if not isinstance(expr, sympy.Basic):
        return
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_Number and abs(node.exp) > MAX_EXPONENT:
            raise ValueError(f"exponent {node.exp} is larger than {MAX_EXPONENT}")
        if (
            isinstance(node, sympy.Pow)
            and not node.exp.is_Number
            and node.base.is_Number
            and abs(node.base) > 1
        ):
            _check_sizes(node.exp)
            if node.exp.is_number and abs(sympy.N(node.exp, 5)) > MAX_EXPONENT:
                raise ValueError("exponent too large")
        if (
            isinstance(node, sympy.factorial)
            and node.args[0].is_number
            and abs(sympy.N(node.args[0], 5)) > MAX_EXPONENT
        ):
            raise ValueError(f"factorial argument larger than {MAX_EXPONENT}")


def _calculator(expression: str) -> str:
    return evaluate(expression)


calculator = FunctionTool(
    _calculator,
    "calculator",
    "Evaluate one math expression exactly with SymPy, e.g. '2^10 - sqrt(16)' or 'factor(x^2 - 1)'.",
    isolated=True,
)
TOOLS.register("calculator")(calculator)
