"""String-level normalisation of one extracted answer: cosmetics out, meaning kept.

Everything here is linear-time regex/str work on a length-capped string, so it is safe to run in the caller's
thread before any budgeted SymPy work. The result is still LaTeX-ish text; structure is parsed later.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Words that only name a unit when they trail a quantity ("15 cm^2", "125 miles", "0.06 yuan").
UNIT_WORDS = (
    "units?|square units?|sq\\.? units?|cm|mm|km|m|meters?|metres?|centimeters?|kilometers?|inches|inch|in|"
    "feet|foot|ft|yards?|yd|miles?|mi|mph|km/h|hours?|hrs?|h|minutes?|mins?|seconds?|secs?|s|days?|weeks?|"
    "months?|years?|dollars?|cents?|yuan|euros?|pounds?|lbs?|kg|grams?|g|liters?|litres?|l|ml|gallons?|"
    "degrees?|deg|radians?|rad|points?|people|persons?|students?|ways?|times|pieces?|items?|cubic \\w+|"
    "square \\w+|sq \\w+"
)
_POWER = r"(?:\s*\^\s*\{?[23]\}?|²|³)?"
_UNIT = rf"(?:{UNIT_WORDS}){_POWER}(?:\s*(?:/|per)\s*(?:{UNIT_WORDS}){_POWER})*"
_UNIT_TAIL = re.compile(rf"(?<=[\d}}])\s*(?:\\,)?\s*(?P<unit>{_UNIT})\s*$", re.I)
_UNIT_ONLY = re.compile(rf"\s*(?P<unit>{_UNIT})\s*", re.I)
# Spellings of one unit: compared after lower-casing and dropping a plural "s".
_UNIT_NAMES = {
    "m": "meter", "metre": "meter", "cm": "centimeter", "centimetre": "centimeter", "mm": "millimeter",
    "km": "kilometer", "kilometre": "kilometer", "in": "inch", "inche": "inch", "ft": "foot", "feet": "foot",
    "yd": "yard", "mi": "mile", "h": "hour", "hr": "hour", "min": "minute", "sec": "second", "s": "second",
    "lb": "pound", "g": "gram", "kg": "kilogram", "l": "liter", "litre": "liter", "ml": "milliliter",
    "deg": "degree", "rad": "radian", "person": "people", "sq": "square", "unit": "",
}  # fmt: skip

_TEXT_CMD = re.compile(
    r"\\(?:text|textbf|textit|textnormal|textrm|mbox|mathrm|mathbf|mathit|operatorname|rm|bf)\s*\{([^{}]*)\}"
)
_SPACES = re.compile(r"(?<!\\)\\[,;:!> ]|\\q?quad|~|\\enspace|\\thinspace|\\hspace\{[^{}]*\}")
_DROP = re.compile(
    r"\\displaystyle|\\left(?=[\\(\[|.{])|\\right(?=[\\)\]|.}])|\\middle|\\bigl?|\\bigr|\\Big[lr]?"
)
_DOLLAR_MATH = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|°|\s*\b(?:degrees?)\b")
_PERCENT = re.compile(r"\s*(?:\\%|%|\\percent\b|\bpercentage\b|\bpercent\b|\bpct\b)")
_CURRENCY = re.compile(r"\\\$|€|£|¥|\\euro|\bUSD\b|\bRs\.?")
_FRAC_CMDS = re.compile(r"\\[dtc]frac")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d)\s*(\d)")
_FRAC_SHORT2 = re.compile(r"\\frac\s*(\{[^{}]*\})\s*(\d)")
_FRAC_SHORT3 = re.compile(r"\\frac\s*(\d)\s*(\{[^{}]*\})")
_SQRT_SHORT = re.compile(r"\\sqrt\s*(\d+|[a-zA-Z])")
_THOUSANDS_BRACE = re.compile(r"\s*\{\s*,\s*\}\s*|,\\!|\\!")
_THOUSANDS = re.compile(r"[+-]?[1-9]\d{0,2}(?:(?:,\d{3})+|(?: \d{3})+)(?:\.\d+)?")
_DECIMAL_COMMA = re.compile(r"[+-]?(?:\d+,(?:\d{2}|\d{4,})|0,\d+)")
_DOUBLE_BACKSLASH = re.compile(r"(?<!\\)\\\\(?=[a-zA-Z{}()\[\]])")
_MIXED = re.compile(r"(?<![\d.^_}{\\a-zA-Z])(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}")
_MARKDOWN = re.compile(r"^(?:\*\*|__|`)+|(?:\*\*|__|`)+$")  # "**42**", "`42`": emphasis around the answer
_TRAIL = re.compile(r"[\s.,;:?]+$")  # not "!": "5!" is a factorial
_UNICODE = {
    "\u2212": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u00d7": "\\times ",
    "\u00f7": "\\div ",
    "\u03c0": "\\pi ",
    "\u221e": "\\infty ",
    "\u2264": "\\le ",
    "\u2265": "\\ge ",
    "\u2260": "\\ne ",
    "\u221a": "\\sqrt",
    "\u00b7": "\\cdot ",
    "\u2208": "\\in ",
    "\u222a": "\\cup ",
    "\u00b1": "\\pm ",
    "\u2205": "\\emptyset ",
}
EMPTY_SET = "\\emptyset"  # the one spelling of the empty set after cleaning (see ``_EMPTY_SET``)
# ``\varnothing``, ``\emptyset``, ``\{\}`` and ``\{ \}`` (spaces already folded) all name the empty set.
_EMPTY_SET = re.compile(r"\\(?:varnothing|emptyset)(?![A-Za-z])|\\\{\s*\\\}")


@dataclass(frozen=True, slots=True)
class Cleaned:
    """A normalised answer: ``text`` plus what was stripped that still matters for comparison.

    ``unit`` is the trailing unit the answer stated (canonical spelling, see ``unit_key``), or None. Units are
    compared only when both sides state one: ``5`` answers ``5 cm``, ``5 m`` does not (no unit conversion).
    """

    text: str
    percent: bool = False
    unit: str | None = None


def unit_key(unit: str) -> str | None:
    """One spelling per unit (``cm`` = ``centimeters``, ``m^2`` = ``square meters``, ``km/h`` = ``kilometers per
    hour``); None for counting words that name no unit (``units``, ``ways``, ``people``)."""
    words = re.sub(r"\s*(?:\^\s*\{?2\}?|²)", " square", unit.lower())
    words = re.sub(r"\s*(?:\^\s*\{?3\}?|³)", " cubic", words).replace("/", " per ")
    out = []
    for word in re.findall(r"[a-z]+", words.replace(".", "")):
        word = "inch" if word == "inches" else word[:-1] if len(word) > 2 and word.endswith("s") else word
        out.append(_UNIT_NAMES.get(word, word))
    power = [w for w in out if w in ("square", "cubic")]
    named = [w for w in out if w not in ("square", "cubic", "per") and w not in _COUNTING]
    return " ".join(named + [w for w in out if w == "per"] + power) if named else None


_COUNTING = {"", "people", "student", "way", "time", "piece", "item", "point"}


def unicode_fold(s: str) -> str:
    """Full-width digits/letters to ASCII (NFKC) and maths symbols to their LaTeX commands."""
    s = unicodedata.normalize("NFKC", s)
    for k, v in _UNICODE.items():
        if k in s:
            s = s.replace(k, v)
    return s


def strip_text_wrappers(s: str) -> str:
    """``\\text{odd}`` -> ``odd`` (innermost first, so nested wrappers also go)."""
    for _ in range(4):
        new = _TEXT_CMD.sub(lambda m: m.group(1), s)
        if new == s:
            break
        s = new
    return s


def clean(answer: str) -> Cleaned:
    """Normalise one answer string (already extracted from the response)."""
    s = _DOUBLE_BACKSLASH.sub(lambda m: "\\", unicode_fold(answer))  # JSON-escaped "\\frac" -> "\frac"
    s = _DOLLAR_MATH.sub(" ", s)
    s = s.replace("\\mathrm{e}", "e").replace("\\operatorname{e}", "e")
    s = _FRAC_CMDS.sub(r"\\frac", s)
    s = _DROP.sub("", s)
    s = _THOUSANDS_BRACE.sub("", s)
    s = _SPACES.sub(" ", s)
    s = _EMPTY_SET.sub(lambda m: EMPTY_SET + " ", s)
    s = _DEGREES.sub("", s)
    percent = bool(_PERCENT.search(s))
    if percent:
        s = _PERCENT.sub("", s)
    s = _CURRENCY.sub("", s)
    s = s.replace("+\\infty", "\\infty").replace("\\lt", "<").replace("\\gt", ">")
    s = re.sub(r"\\(?:leq?|leqslant)\b", r"\\le ", s)
    s = re.sub(r"\\(?:geq?|geqslant)\b", r"\\ge ", s)
    s = re.sub(r"\\(?:neq?)\b", r"\\ne ", s)
    s = s.replace(">=", "\\ge ").replace("<=", "\\le ").replace("!=", "\\ne ")
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_SHORT2.sub(r"\\frac\1{\2}", s)
    s = _FRAC_SHORT3.sub(r"\\frac{\1}\2", s)
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s, unit = split_unit(s)
    s = _MIXED.sub(r"(\1+\\frac{\2}{\3})", s)
    s = " ".join(s.split())
    s = _MARKDOWN.sub("", s)
    s = _TRAIL.sub("", s).strip()
    # Separators only where the whole answer is one number: "1,234,567" / "1 000" / "2,74"; "(2,12)" is a pair.
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "").replace(" ", "")
    elif _DECIMAL_COMMA.fullmatch(s):
        s = s.replace(",", ".")
    if s.startswith("=") and not s.startswith("=="):
        s = s[1:].strip()
    return Cleaned(s, percent, unit_key(unit) if unit else None)


def strip_units(s: str) -> str:
    """``s`` without a trailing unit (see ``split_unit``)."""
    return split_unit(s)[0]


def split_unit(s: str) -> tuple[str, str | None]:
    """(``s`` without a trailing unit, that unit): ``15 \\text{ cm}^2``, ``125 miles``, ``0.06 yuan``.

    Only unit words count: a trailing ``\\text{...}`` that says anything else (``7 \\text{ or 8}``) is part of
    the answer, and a whole-text answer (``\\text{odd}``) is kept as text.
    """
    stripped = s.strip()
    whole = _TEXT_CMD.fullmatch(stripped)
    if whole:
        return whole.group(1), None
    m = re.search(r"(?<=[\d}\)a-zA-Z])\s*" + _TEXT_CMD.pattern + r"(?P<power>\s*\^\s*\{?[23]\}?)?\s*$", s)
    if m and (unit := _UNIT_ONLY.fullmatch(m.group(1))):
        return s[: m.start()], unit.group("unit") + (m.group("power") or "")
    tail = _UNIT_TAIL.search(s)
    if tail:
        return s[: tail.start()], tail.group("unit")
    return s, None


def strip_braces(s: str) -> str:
    """Remove one layer of redundant outer ``{...}`` grouping (``{35 cm,4}`` -> ``35 cm,4``)."""
    s = s.strip()
    for _ in range(8):  # bounded: each layer costs a scan, and deeper nesting is not a real answer
        if not (len(s) >= 2 and s[0] == "{" and s[-1] == "}" and _matching(s, 0) == len(s) - 1):
            break
        s = s[1:-1].strip()
    return s


def _matching(s: str, i: int) -> int:
    """Index of the bracket closing ``s[i]`` (same kind), or -1."""
    open_c = s[i]
    close_c = {"{": "}", "(": ")", "[": "]"}[open_c]
    depth = 0
    for j in range(i, len(s)):
        c = s[j]
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return j
    return -1
