"""Pure-Python exact numbers: the fast path that settles most real answers without SymPy.

Integers, decimals, simple fractions, mixed numbers and ``a\\times10^{k}`` parse to ``Fraction`` exactly.
Digit strings longer than ``MAX_DIGITS`` are refused (compared as strings by the caller), so a 1 MB number can
neither hit Python's int-conversion limit nor cost quadratic time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MAX_DIGITS = 2000

_SIGN = r"[+-]?"
_DEC = r"(?:\d+(?:\.\d*)?|\.\d+)"
_RE_DEC = re.compile(rf"({_SIGN})\s*({_DEC})")
_RE_SCI = re.compile(
    rf"({_SIGN})\s*({_DEC})\s*(?:\\times|\\cdot|\*|x)\s*10\s*\^\s*\{{?\s*([+-]?\d{{1,4}})\s*\}}?"
)
_RE_E = re.compile(rf"({_SIGN})\s*({_DEC})[eE]([+-]?\d{{1,4}})")
_RE_FRAC = re.compile(rf"({_SIGN})\s*\\frac\s*\{{\s*({_SIGN}\s*\d+)\s*\}}\s*\{{\s*({_SIGN}\s*\d+)\s*\}}")
_RE_SLASH = re.compile(rf"({_SIGN})\s*\(?\s*({_SIGN}\d+)\s*\)?\s*/\s*\(?\s*({_SIGN}\d+)\s*\)?")
_RE_MIXED = re.compile(rf"({_SIGN})\s*\(?\s*(\d+)\s*\+\s*\\frac\{{(\d+)\}}\{{(\d+)\}}\s*\)?")
_RE_REPEAT = re.compile(rf"({_SIGN})\s*(\d*)\.(\d*)\\overline\s*\{{(\d{{1,50}})\}}")


@dataclass(frozen=True, slots=True)
class Number:
    """An exact value plus the number of decimals the writer stated (None when written exactly)."""

    value: Fraction
    decimals: int | None = None


def _sign(s: str) -> int:
    return -1 if s.count("-") % 2 else 1


def _dec(text: str) -> tuple[Fraction, int | None]:
    if "." in text:
        whole, frac = text.split(".")
        decimals = len(frac)
        return Fraction(int(whole or "0") * 10**decimals + int(frac or "0"), 10**decimals), decimals
    return Fraction(int(text)), None


def parse_number(s: str) -> Number | None:
    """``s`` as an exact number, or None when it is anything else (left to SymPy)."""
    s = s.strip()
    if not s or sum(c.isdigit() for c in s) > MAX_DIGITS:
        return None
    while s.startswith("(") and s.endswith(")") and s.count("(") == 1 and s.count(")") == 1:
        s = s[1:-1].strip()
    s = s.replace("{", "").replace("}", "") if re.fullmatch(r"[+-]?\{[\d.]+\}", s) else s
    if m := _RE_DEC.fullmatch(s):
        value, decimals = _dec(m.group(2))
        return Number(_sign(m.group(1)) * value, decimals)
    if m := _RE_SCI.fullmatch(s) or _RE_E.fullmatch(s):
        value, decimals = _dec(m.group(2))
        exp = int(m.group(3))
        shifted = None if decimals is None else max(decimals - exp, 0)
        return Number(_sign(m.group(1)) * value * Fraction(10) ** exp, shifted)
    if m := _RE_FRAC.fullmatch(s) or _RE_SLASH.fullmatch(s):
        num, den = int(m.group(2).replace(" ", "")), int(m.group(3).replace(" ", ""))
        if den == 0:
            return None
        return Number(_sign(m.group(1)) * Fraction(num, den))
    if m := _RE_REPEAT.fullmatch(s):  # 0.1\overline{6} = 1/10 + 6/90
        whole, fixed, period = m.group(2) or "0", m.group(3), m.group(4)
        value = int(whole) + Fraction(int(fixed or "0"), 10 ** len(fixed))
        value += Fraction(int(period), (10 ** len(period) - 1) * 10 ** len(fixed))
        return Number(_sign(m.group(1)) * value)
    if m := _RE_MIXED.fullmatch(s):
        den = int(m.group(4))
        if den == 0:
            return None
        return Number(_sign(m.group(1)) * (int(m.group(2)) + Fraction(int(m.group(3)), den)))
    return None


def round_half_up(value: Fraction, decimals: int) -> Fraction:
    """``value`` rounded to ``decimals`` places, halves away from zero (how answers are rounded by hand)."""
    scale = 10**decimals
    sign = -1 if value < 0 else 1
    return sign * Fraction(int(abs(value) * scale + Fraction(1, 2)), scale)


def agree_when_rounded(
    gold: Fraction, gold_decimals: int | None, pred: Fraction, pred_decimals: int | None, min_decimals: int
) -> bool:
    """The lenient ``rounded_decimals=N`` option: a gold and a prediction that differ only by rounding.

    They agree when both, rounded to the shorter of the precisions either one states (and at least ``N``
    decimals), are the same number: ``3.14`` for ``\\pi`` and ``0.33`` for ``1/3`` at N <= 2, ``0.5`` for ``0.54``
    at N <= 1. An integer gold stays exact (``100000`` never matches ``99999.9``), and so does a pair in which
    nobody stated decimals. Off by default, and never in strict mode: ``3.14`` is not ``\\pi``.
    """
    stated = [d for d in (gold_decimals, pred_decimals) if d is not None]
    if not stated or (gold_decimals is None and gold.denominator == 1):
        return False
    k = min(stated)
    return k >= min_decimals and round_half_up(gold, k) == round_half_up(pred, k)


def scaled(value: Fraction, percent: bool) -> tuple[Fraction, ...]:
    """The readings of a value written with ``%``: 50% is both 50 and 0.5."""
    return (value, value / 100) if percent else (value,)
