"""Split a normalised answer into its shape: lists, sets, tuples, intervals, unions, relations, leaves.

Pure Python and linear-ish (bounded recursion on a length-capped string). SymPy only ever sees leaves, so the
comparison policy for shapes (order matters for tuples, not for sets; open/closed ends matter) is ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graders.math.normalize import EMPTY_SET, strip_braces, strip_units

MAX_ITEMS = 64  # more items than this is not judged item by item: ``TooManyItems``, never a silent cut
MAX_DEPTH = 8


class TooManyItems(ValueError):
    """A list, set or tuple with more than ``MAX_ITEMS`` items (the grader says so instead of truncating)."""


def _capped(items: list[str]) -> list[str]:
    if len(items) > MAX_ITEMS:
        raise TooManyItems(f"more than {MAX_ITEMS} items ({len(items)})")
    return items


@dataclass(frozen=True, slots=True)
class Leaf:
    text: str


@dataclass(frozen=True, slots=True)
class Items:
    """``kind``: ``set`` (unordered, explicit braces), ``list`` (unordered, bare commas / and / or / \\pm), ``tuple``."""

    kind: str
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Interval:
    left_closed: bool
    low: Node
    high: Node
    right_closed: bool


@dataclass(frozen=True, slots=True)
class Union:
    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Relation:
    """A chain ``a op b op c``; ops are ``=``, ``<``, ``>``, ``\\le``, ``\\ge``, ``\\ne``, ``\\approx``, ``\\in``."""

    parts: tuple[Node, ...]
    ops: tuple[str, ...]


Node = Leaf | Items | Interval | Union | Relation


def leaves(node: Node) -> list[Leaf]:
    """Every leaf of ``node``, left to right."""
    if isinstance(node, Leaf):
        return [node]
    children: tuple[Node, ...]
    if isinstance(node, Items):
        children = node.items
    elif isinstance(node, Interval):
        children = (node.low, node.high)
    else:  # Union, Relation
        children = node.parts
    return [leaf for child in children for leaf in leaves(child)]


_OPEN = "([{"
_CLOSE = ")]}"
_REL_RE = re.compile(r"\\le\b|\\ge\b|\\ne\b|\\approx\b|\\in\b|\\equiv\b|<|>|=")
_WORD_SPLIT = re.compile(r"\\text\{\s*(?:and|or|,)\s*\}|(?<![a-zA-Z\\])(?:and|or)(?![a-zA-Z])")


def _depth_scan(s: str) -> list[int]:
    """Bracket depth before each character, treating ``\\{``/``\\}`` and ``\\left``-less brackets alike."""
    depths = []
    depth = 0
    for c in s:
        if c in _CLOSE:
            depth = max(depth - 1, 0)
        depths.append(depth)
        if c in _OPEN:
            depth += 1
    return depths


def split_top(s: str, seps: str) -> list[str]:
    """Split on any char of ``seps`` at bracket depth 0."""
    depths = _depth_scan(s)
    parts, start = [], 0
    for i, c in enumerate(s):
        if c in seps and depths[i] == 0 and not (c == "," and i > 0 and s[i - 1] == "\\"):
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


def _top_matches(s: str, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    depths = _depth_scan(s)
    return [m for m in pattern.finditer(s) if depths[m.start()] == 0]


def _wrapped(s: str) -> tuple[str, str, str] | None:
    """``s`` as ``open + inner + close`` when one bracket pair spans the whole string."""
    if len(s) < 2:
        return None
    if s.startswith("\\{") and s.endswith("\\}"):
        inner = s[2:-2]
        return (
            ("{", inner, "}") if min(_depth_scan(inner + " "), default=0) >= 0 and _balanced(inner) else None
        )
    if s[0] in "([" and s[-1] in ")]":
        depths = _depth_scan(s)
        if all(d > 0 for d in depths[1:-1]):
            return s[0], s[1:-1], s[-1]
    return None


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += c in _OPEN
        depth -= c in _CLOSE
        if depth < 0:
            return False
    return depth == 0


def _pm_variants(s: str) -> list[str] | None:
    if "\\pm" not in s and "\\mp" not in s:
        return None
    if s.count("\\pm") + s.count("\\mp") > 2:
        return None
    plus = s.replace("\\pm", "+", 1) if "\\pm" in s else s.replace("\\mp", "-", 1)
    minus = s.replace("\\pm", "-", 1) if "\\pm" in s else s.replace("\\mp", "+", 1)
    out = []
    for v in (plus, minus):
        out.extend(_pm_variants(v) or [v])
    return out


def parse(s: str, depth: int = 0) -> Node:
    """The shape of answer text ``s`` (already cleaned)."""
    s = strip_braces(s.strip())
    if depth > MAX_DEPTH or not s:
        return Leaf(strip_units(s).strip() or s)
    words = _top_matches(s, _WORD_SPLIT)
    if words:
        pieces, start = [], 0
        for m in words:
            pieces.append(s[start : m.start()])
            start = m.end()
        pieces.append(s[start:])
        items = [p for piece in pieces for p in split_top(piece, ",;") if p.strip()]
        if len(items) > 1:
            return Items("list", tuple(parse(p, depth + 1) for p in _capped(items)))
    parts = split_top(s, ";")
    if len(parts) > 1:  # ";" separates solutions: "p=5,q=2; p=7,q=2"
        return Items("list", tuple(parse(p, depth + 1) for p in _capped(parts) if p))
    parts = split_top(s, ",")
    if len(parts) > 1:  # "1, 2", "x = 1, y = 2", "a=4,-8"
        return Items("list", tuple(parse(p, depth + 1) for p in _capped(parts) if p))
    unions = [m for m in _top_matches(s, re.compile(r"\\cup\b|∪"))]
    if unions:
        pieces, start = [], 0
        for m in unions:
            pieces.append(s[start : m.start()])
            start = m.end()
        pieces.append(s[start:])
        return Union(tuple(parse(p, depth + 1) for p in _capped(pieces)))
    rels = _top_matches(s, _REL_RE)
    if rels:
        parts_r, ops, start = [], [], 0
        for m in rels:
            parts_r.append(s[start : m.start()])
            ops.append(m.group(0))
            start = m.end()
        parts_r.append(s[start:])
        if all(p.strip() for p in parts_r):
            return Relation(tuple(parse(p, depth + 1) for p in parts_r), tuple(ops))
    variants = _pm_variants(s)
    if variants:
        return Items("list", tuple(parse(v, depth + 1) for v in variants))
    wrapped = _wrapped(s)
    if wrapped:
        open_c, inner, close_c = wrapped
        items = split_top(inner, ",;")
        if open_c == "{":
            members = tuple(parse(p, depth + 1) for p in _capped(items) if p)
            return Items("set", members) if members else Leaf(EMPTY_SET)  # "\\{,\\}": no member at all
        if len(items) == 2 and (open_c == "[" or close_c == "]"):
            return Interval(
                open_c == "[", parse(items[0], depth + 1), parse(items[1], depth + 1), close_c == "]"
            )
        if len(items) > 1:
            return Items("tuple", tuple(parse(p, depth + 1) for p in _capped(items)))
        if open_c == "(" and "\\begin{" in inner:  # "(\begin{pmatrix}...\end{pmatrix})"
            return parse(inner, depth + 1)
    return Leaf(strip_units(s).strip() or s)
