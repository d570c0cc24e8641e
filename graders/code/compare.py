"""Compare a program's stdout with the expected output: per line, whitespace-insensitive, optional float
tolerance, configurable case policy."""

from __future__ import annotations

from typing import Literal

CasePolicy = Literal["sensitive", "insensitive"]


def _lines(text: str, case: CasePolicy) -> list[list[str]]:
    if case == "insensitive":
        text = text.lower()
    lines = [line.split() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def _token_equal(got: str, expected: str, float_tol: float | None) -> bool:
    if got == expected:
        return True
    if float_tol is None:
        return False
    try:
        g, e = float(got), float(expected)
    except ValueError:
        return False
    return abs(g - e) <= float_tol * max(1.0, abs(e))


def output_matches(
    got: str, expected: str, *, float_tol: float | None = None, case: CasePolicy = "sensitive"
) -> bool:
    """True when every line has the same whitespace-separated tokens (``\\r\\n``, trailing spaces and blank
    edge lines ignored)."""
    g, e = _lines(got, case), _lines(expected, case)
    return len(g) == len(e) and all(
        len(gl) == len(el) and all(_token_equal(a, b, float_tol) for a, b in zip(gl, el, strict=True))
        for gl, el in zip(g, e, strict=True)
    )
