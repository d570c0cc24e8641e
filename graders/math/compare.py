"""Equivalence policy over answer shapes, gold first.

The shape rules live here (order matters for tuples, not for sets/lists; interval ends matter; an assignment
``x = 4`` answers ``4``; a chain ``x = 5+5+1 = 11`` commits to its last part, in strict mode only if it is
true: ``8 = 7`` answers nothing). Leaves are judged by a
``LeafJudge``: the in-thread ``FastJudge`` settles numbers and text and raises ``NeedsSymbolic`` for anything
else, which the caller then sends to the budgeted SymPy worker running the same policy with ``SymbolicJudge``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Protocol

from graders.math.normalize import EMPTY_SET, strip_text_wrappers
from graders.math.numbers import Number, agree_when_rounded, parse_number, scaled
from graders.math.structure import Interval, Items, Leaf, Node, Relation, Union

# A SymPy helper's reply error when the gold, not the answer, is at fault (the grader then keeps `error`).
GOLD_UNREADABLE = "ground truth does not parse"

_NAME = re.compile(r"[A-Za-z\\|:(),{}\s^'_]*")
_TEXTY = re.compile(r"[A-Za-z][A-Za-z\s'\-.]*")
_EQ_OPS = ("=", "\\approx", "\\in")
_COMMAND = re.compile(r"\\(?:begin|end)\{[a-z*]+\}(?:\{[a-z|]*\})?|\\[A-Za-z]+")
_BASE_NUMERAL = re.compile(r"([0-9A-Fa-f]+)_\{?(\d+)\}?")
_FLIP = {"<": ">", "\\le": "\\ge", ">": "<", "\\ge": "\\le"}


class NeedsSymbolic(Exception):
    """The fast judge cannot settle this leaf without SymPy."""


class UngradableGold(Exception):
    """A gold leaf that neither the fast rules nor SymPy can read: no prediction can be judged against it."""


@dataclass(frozen=True, slots=True)
class Context:
    gold_percent: bool = False
    pred_percent: bool = False
    rounded_decimals: int | None = None  # lenient option: accept values equal up to rounding (see numbers.py)
    chains_must_hold: bool = (
        False  # strict: a predicted chain `8 = 7` must be true to commit to its last part
    )


class LeafJudge(Protocol):
    def leaf(self, gold: str, pred: str, ctx: Context) -> bool: ...

    def relation(self, gold: Relation, pred: Relation, ctx: Context) -> bool: ...


def squash(s: str) -> str:
    return re.sub(r"\s+", "", s).lower()


def text_form(s: str) -> str | None:
    """The words of a text answer (``\\text{(C)}`` -> ``c``), or None when ``s`` is maths."""
    t = strip_text_wrappers(s).strip()
    if t.startswith("(") and t.endswith(")") and len(t) <= 4:
        t = t[1:-1].strip()
    return " ".join(t.lower().split()) if _TEXTY.fullmatch(t) else None


def numbers_equal(gold: Number, pred: Number, ctx: Context) -> bool:
    for g in scaled(gold.value, ctx.gold_percent):
        for p in scaled(pred.value, ctx.pred_percent):
            if g == p:
                return True
    if ctx.gold_percent or ctx.pred_percent or ctx.rounded_decimals is None:
        return False  # exact values compare exactly: a decimal is the number it writes, nothing near it
    return agree_when_rounded(gold.value, gold.decimals, pred.value, pred.decimals, ctx.rounded_decimals)


class FastJudge:
    """Numbers and words only; everything else needs SymPy."""

    def leaf(self, gold: str, pred: str, ctx: Context) -> bool:
        if squash(gold) == squash(pred) and ctx.gold_percent == ctx.pred_percent:
            return True
        if EMPTY_SET in (gold.strip(), pred.strip()):  # the empty set equals only itself
            return False
        g, p = parse_number(gold), parse_number(pred)
        if g is not None and p is not None:
            return numbers_equal(g, p, ctx)
        gb, pb = _BASE_NUMERAL.fullmatch(gold.strip()), _BASE_NUMERAL.fullmatch(pred.strip())
        if gb and pb:  # "204_5": digits in a stated base compare exactly, base included
            return (gb.group(1).lstrip("0"), gb.group(2)) == (pb.group(1).lstrip("0"), pb.group(2))
        gt = text_form(gold)
        if gt is not None and (len(gt) > 1 or text_form(pred) is not None):
            return gt == text_form(pred)
        if unknowns(gold) - unknowns(pred):  # "(a+5)(b+2)" vs "(+5)(b+2)": an unknown of the gold is missing
            return False
        raise NeedsSymbolic(gold)

    def relation(self, gold: Relation, pred: Relation, ctx: Context) -> bool:
        if gold.ops == pred.ops and all(
            equal(g, p, self, ctx) for g, p in zip(gold.parts, pred.parts, strict=True)
        ):
            return True
        raise NeedsSymbolic("relation")


def _leaf_text(node: Node) -> str | None:
    return node.text if isinstance(node, Leaf) else None


def is_name(node: Node) -> bool:
    """Something an answer can be assigned to: ``x``, ``f(x)``, ``a_{37}``, ``(p,q)``, ``|AB|``, ``V_1:V_2``."""
    if isinstance(node, Items) and node.kind == "tuple":
        return all(is_name(i) for i in node.items)
    text = _leaf_text(node)
    if text is None:
        return False
    bare = re.sub(r"_\{?[\w,]*\}?", "", text)
    bare = re.sub(r"\\(?:text|mathrm|frac|overline|angle|triangle)\b", "", bare)
    return bool(bare.strip()) and any(c.isalpha() for c in bare) and bool(_NAME.fullmatch(bare))


def unknowns(text: str) -> set[str]:
    """The single-letter unknowns of a LaTeX expression (commands and the constants e, i left out).

    A reference answer is written simplified, so an unknown it contains cannot cancel away; a prediction that
    lacks one is a different answer and needs no SymPy to say so.
    """
    return {c.lower() for c in _COMMAND.sub(" ", strip_text_wrappers(text)) if c.isalpha()} - {"e", "i"}


def _has_unknown(text: str) -> bool:
    """A letter outside LaTeX commands: ``\\frac{1}{2}`` has none, ``2x`` has one."""
    return any(c.isalpha() for c in _COMMAND.sub("", text))


def answer_part(node: Node, *, predicted: bool = False) -> Node:
    """What a relation commits to when used as a value: ``x = 4`` -> ``4``; ``x = 5+5+1 = 11`` -> ``11``.

    In a prediction, ``\\frac12 = \\frac{10}{9}`` (a computation with no unknown on the left) also commits to
    its last part; a gold ``7 = 11a+c`` is an equation and stays one.
    """
    if not isinstance(node, Relation):
        return node
    ops = list(node.ops)
    parts = list(node.parts)
    while (
        ops and ops[-1] == "\\approx" and "=" in ops[:-1]
    ):  # "x = 1/3 \\approx 0.33": the exact value counts
        ops.pop()
        parts.pop()
    if not ops or any(op not in _EQ_OPS for op in ops):
        return node
    if len(ops) > 1 or is_name(parts[0]):
        return parts[-1]
    if predicted and ops == ["="] and isinstance(parts[0], Leaf) and not _has_unknown(parts[0].text):
        return parts[-1]
    return node


def _as_interval(node: Node) -> Interval | None:
    """An open 2-tuple ``(a, b)`` or a chain ``a < x \\le b`` read as an interval."""
    if isinstance(node, Interval):
        return node
    if isinstance(node, Items) and node.kind == "tuple" and len(node.items) == 2:
        return Interval(False, node.items[0], node.items[1], False)
    if isinstance(node, Relation) and len(node.ops) == 2 and is_name(node.parts[1]):
        ops = node.ops
        if all(op in ("<", "\\le") for op in ops):
            return Interval(ops[0] == "\\le", node.parts[0], node.parts[2], ops[1] == "\\le")
        if all(op in (">", "\\ge") for op in ops):
            return Interval(ops[1] == "\\ge", node.parts[2], node.parts[0], ops[0] == "\\ge")
    return None


def _dedupe(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """Sets ignore repeats: the same item written twice (spacing aside) counts once."""
    seen: dict[str, Node] = {}
    for n in nodes:
        seen.setdefault(re.sub(r"\s+", "", repr(n)), n)
    return tuple(seen.values())


def _match_unordered(gold: tuple[Node, ...], pred: tuple[Node, ...], judge: LeafJudge, ctx: Context) -> bool:
    gold, pred = _dedupe(gold), _dedupe(pred)
    if len(gold) != len(pred):
        return False
    free = list(pred)
    for g in gold:
        for k, p in enumerate(free):
            if equal(g, p, judge, ctx):
                del free[k]
                break
        else:
            return False
    return True


def assignments(node: Node) -> dict[str, Node] | None:
    """``x = 1, y = 2`` (two or more different names) as ``{"x": 1, "y": 2}``; None for anything else."""
    if not (isinstance(node, Items) and node.kind == "list" and len(node.items) > 1):
        return None
    found: dict[str, Node] = {}
    for item in node.items:
        if not (isinstance(item, Relation) and item.ops == ("=",) and isinstance(item.parts[0], Leaf)):
            return None
        name = squash(item.parts[0].text)
        if name in found or not is_name(item.parts[0]):
            return None
        found[name] = item.parts[1]
    return found


def _flatten(node: Node) -> tuple[Node, ...]:
    """Items of nested lists/sets (``\\boxed{1}, \\boxed{2}`` and ``\\{1, 2\\}`` alike).

    Tuples stay whole, and so does a nested group of assignments: in ``p=5,q=2; p=7,q=2`` each group is one
    solution (it matches the tuple ``(5,2)``).
    """
    if isinstance(node, Items) and node.kind in ("list", "set"):
        out: list[Node] = []
        for item in node.items:
            out.extend((item,) if assignments(item) is not None else _flatten(item))
        return tuple(out)
    return (node,)


def _is_tuple(node: Node) -> bool:
    return isinstance(node, Items) and node.kind == "tuple"


def false_chain(pred: Node, judge: LeafJudge, ctx: Context) -> bool:
    """Strict mode: a predicted chain of equalities whose closed-form parts disagree (``8 = 7``,
    ``2+2 = 5``) is a false statement, so it commits to nothing. Lenient mode keeps Math-Verify's reading
    (the last part counts: its labels accept ``\\frac{1}{2} \\$ = \\frac{10}{9}`` for ``10/9``)."""
    if not (ctx.chains_must_hold and isinstance(pred, Relation)) or any(op != "=" for op in pred.ops):
        return False
    last = pred.parts[-1]
    if not isinstance(last, Leaf) or _has_unknown(last.text):
        return False
    own = replace(ctx, gold_percent=ctx.pred_percent)  # both parts are the prediction's
    return any(
        isinstance(part, Leaf) and not _has_unknown(part.text) and _disagree(part, last, judge, own)
        for part in pred.parts[:-1]
    )


def _disagree(part: Leaf, last: Leaf, judge: LeafJudge, ctx: Context) -> bool:
    """Do two parts of the prediction's own chain differ? ``part`` stands where the gold would, so a part
    no judge can read is the prediction's, never the gold's: it proves nothing false (the last part is then
    judged as usual), and it must not turn the grade into ``error`` (``\\}=\\{``, found by hypothesis)."""
    try:
        return not equal(part, last, judge, ctx)
    except UngradableGold:
        return False


def equal(gold: Node, pred: Node, judge: LeafJudge, ctx: Context) -> bool:
    """Is ``pred`` an acceptable answer for ``gold``? May raise ``NeedsSymbolic`` (fast judge)."""
    if false_chain(pred, judge, ctx):
        return False
    gold_named, pred_named = assignments(gold), assignments(pred)
    if gold_named is not None and pred_named is not None and set(gold_named) == set(pred_named):
        # "a_3 = 2, a_{37} = 19" against "a_{37} = 19, a_3 = 2": the names pair the values up
        return all(equal(gold_named[k], pred_named[k], judge, ctx) for k in gold_named)
    if isinstance(gold, Items) != isinstance(pred, Items) and Leaf(EMPTY_SET) in (gold, pred):
        return False  # "\\{\\emptyset\\}" is a set with one member, not the empty set
    if _is_tuple(gold) != _is_tuple(pred) and isinstance(gold, Items) and isinstance(pred, Items):
        # "(1,3)" against "{1,3}": the tuple's order is part of the answer
        return len(gold.items) == len(pred.items) and all(
            equal(g, p, judge, ctx) for g, p in zip(gold.items, pred.items, strict=True)
        )
    gold_items, pred_items = _flatten(gold), _flatten(pred)
    if not gold_items or not pred_items:  # a list of nothing: only another such list matches it
        return not gold_items and not pred_items
    if len(gold_items) > 1 or len(pred_items) > 1:
        if any(false_chain(p, judge, ctx) for p in pred_items):
            return False
        gold_items = tuple(answer_part(g) for g in gold_items)
        pred_items = tuple(answer_part(p, predicted=True) for p in pred_items)
        return _match_unordered(gold_items, pred_items, judge, ctx)
    gold, pred = gold_items[0], pred_items[0]
    if isinstance(gold, Relation) and isinstance(pred, Relation):
        if gold.ops == pred.ops == ("=",) and is_name(gold.parts[0]) and is_name(pred.parts[0]):
            return equal(gold.parts[1], pred.parts[1], judge, ctx)
        g2, p2 = answer_part(gold), answer_part(pred, predicted=True)
        if not isinstance(g2, Relation) and not isinstance(p2, Relation):
            return equal(g2, p2, judge, ctx)
        # gold sets the format: "-2 \le x \le 7" accepts "x \in [-2,7]", but an interval gold needs an interval
        gi, pi = _as_interval(g2), (None if isinstance(p2, Relation) else _as_interval(p2))
        if gi is not None and pi is not None:
            return equal(gi, pi, judge, ctx)
        return judge.relation(gold, pred, ctx)
    if isinstance(gold, Relation) or isinstance(pred, Relation):
        g2, p2 = answer_part(gold), answer_part(pred, predicted=True)
        if not isinstance(g2, Relation) and not isinstance(p2, Relation):
            return equal(g2, p2, judge, ctx)
        if isinstance(p2, Interval | Items) or isinstance(g2, Interval | Items):
            gi, pi = _as_interval(g2), _as_interval(p2)
            if isinstance(pred, Relation) and not isinstance(p2, Interval):
                pi = None  # gold sets the format: an interval answer is not matched by an inequality
            return gi is not None and pi is not None and equal(gi, pi, judge, ctx)
        if isinstance(g2, Relation) or isinstance(p2, Relation):
            return False
        return equal(g2, p2, judge, ctx)
    if isinstance(gold, Interval) or isinstance(pred, Interval):
        gi, pi = _as_interval(gold), _as_interval(pred)
        if gi is None or pi is None or gi.left_closed != pi.left_closed or gi.right_closed != pi.right_closed:
            return False
        return equal(gi.low, pi.low, judge, ctx) and equal(gi.high, pi.high, judge, ctx)
    if isinstance(gold, Union) or isinstance(pred, Union):
        gp = gold.parts if isinstance(gold, Union) else (gold,)
        pp = pred.parts if isinstance(pred, Union) else (pred,)
        return _match_unordered(gp, pp, judge, ctx)
    if isinstance(gold, Items) or isinstance(pred, Items):  # tuples (only kind left unflattened)
        if not (isinstance(gold, Items) and isinstance(pred, Items)) or len(gold.items) != len(pred.items):
            return False
        return all(equal(g, p, judge, ctx) for g, p in zip(gold.items, pred.items, strict=True))
    assert isinstance(gold, Leaf) and isinstance(pred, Leaf)
    return judge.leaf(gold.text, pred.text, ctx)


def flip(rel: Relation) -> Relation:
    """``a < b`` as ``b > a`` so that relations compare in one orientation."""
    if len(rel.ops) == 1 and rel.ops[0] in ("<", "\\le"):
        return Relation((rel.parts[1], rel.parts[0]), (_FLIP[rel.ops[0]],))
    return rel
