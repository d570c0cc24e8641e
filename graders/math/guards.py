"""Cheap pre-checks that predict a SymPy blow-up before a worker is spent on it.

They are an optimisation, not the bound (the killable worker is the bound): they let the common hostile
answers (exponent towers, huge factorials, megabytes of digits) fail in microseconds instead of a full budget.
"""

from __future__ import annotations

import math
import re

MAX_ANSWER_CHARS = 2000
MAX_RESULT_DIGITS = 100_000

_INT = r"\{?\s*(\d+)\s*\}?"
_TOWER = re.compile(rf"(\d+)\s*\^\s*\{{?\s*(\d+)\s*\^\s*{_INT}")
_POWER = re.compile(rf"(\d+)\s*\^\s*{_INT}")
_FACTORIAL = re.compile(r"(\d+)\s*\}?\s*!|\\(?:factorial)\{(\d+)\}")
_DIGITS = re.compile(r"\d{5000,}")
_NESTED_POW = re.compile(r"\^\s*\{[^{}]*\^\s*\{[^{}]*\^")


def _digits_of_power(base: int, exponent_log10: float) -> float:
    return 0.0 if base <= 1 else 10**exponent_log10 * math.log10(base) if exponent_log10 < 300 else math.inf


def unsafe(text: str) -> str | None:
    """Why evaluating ``text`` would blow the budget, or None when it looks affordable."""
    if len(text) > MAX_ANSWER_CHARS:
        return f"answer longer than {MAX_ANSWER_CHARS} characters"
    if _DIGITS.search(text):
        return "number with thousands of digits"
    if _NESTED_POW.search(text):
        return "exponent tower"
    for m in _TOWER.finditer(text):
        base, mid, top = (int(g) for g in m.groups()[:3])
        exponent_log10 = top * math.log10(mid) if mid > 1 else 0.0
        if _digits_of_power(base, exponent_log10) > MAX_RESULT_DIGITS:
            return "exponent tower"
    for m in _POWER.finditer(text):
        base, exp = int(m.group(1)), int(m.group(2)) if len(m.group(2)) < 30 else 10**30
        if base > 1 and exp * math.log10(base) > MAX_RESULT_DIGITS:
            return "power with too many digits"
    for m in _FACTORIAL.finditer(text):
        n = m.group(1) or m.group(2)
        if len(n) > 5 or int(n) > 20000:
            return "huge factorial"
    return None
