"""SymPy leaves: parse with latex2sympy2_extended, then exact arithmetic first, numbers only at stated precision.

Imported only inside the budgeted worker process (see ``worker.py``): nothing here is time-bounded by itself.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

import sympy
from latex2sympy2_extended import latex2sympy

from graders.math.compare import Context, FastJudge, NeedsSymbolic, UngradableGold, equal, flip
from graders.math.numbers import agree_when_rounded, parse_number
from graders.math.structure import Leaf, Relation, parse

_I = sympy.Symbol("i")
_PREC = 60
_REL_TOL = sympy.Float("1e-40", _PREC)  # a filter only: what agrees this closely is then compared exactly
_ZERO_DIGITS = 600
_MATRIX_ENV = re.compile(r"\\begin\{array\}\{[^{}]*\}")


@lru_cache(maxsize=4096)
def to_sympy(text: str) -> Any:
    """``text`` as a SymPy object, or None when the parser refuses it.

    Memoised per worker: RL grades many samples against one gold, and SymPy objects are immutable.
    """
    text = _MATRIX_ENV.sub(r"\\begin{bmatrix}", text).replace("\\end{array}", "\\end{bmatrix}")
    text = re.sub(r"\[\s*(\\begin\{bmatrix\}.*\\end\{bmatrix\})\s*\]", r"\1", text, flags=re.S)
    try:
        expr = latex2sympy(text, normalization_config=None)
    except Exception:  # the parser signals "not LaTeX" by raising anything: that is a verdict, not a crash
        return None
    if isinstance(expr, sympy.MatrixExpr):  # "A + B", "A B" of explicit matrices: evaluate to one matrix
        expr = expr.doit()
        expr = expr.as_explicit() if isinstance(expr, sympy.MatrixExpr) else expr
    if isinstance(expr, sympy.Basic | sympy.MatrixBase) and expr.atoms(sympy.Float):
        # decimals as written are exact values: "0.2" is 1/5, not the nearest binary double
        expr = expr.xreplace({f: sympy.Rational(str(f)) for f in expr.atoms(sympy.Float)})
    if isinstance(expr, sympy.Basic) and _I in expr.free_symbols:
        expr = expr.subs(_I, sympy.I)
    return expr


def numeric(expr: Any) -> Any:
    """A complex number at high precision, or None when ``expr`` is not a closed-form number."""
    if not isinstance(expr, sympy.Expr) or expr.free_symbols:
        return None
    value = expr.evalf(_PREC)
    return value if value.is_number and value.is_finite is not False else None


_DECIMAL_LITERAL = re.compile(r"\d*\.(\d+)")


def _stated_decimals(text: str) -> int | None:
    """The most decimals any number in ``text`` states (None: all written exactly)."""
    found = [len(m.group(1)) for m in _DECIMAL_LITERAL.finditer(text)]
    return max(found) if found else None


def _gold_decimals(text: str) -> int | None:
    number = parse_number(text)
    return number.decimals if number is not None else None


_SAMPLES = (sympy.Rational(37, 100), sympy.Rational(113, 100), sympy.Rational(-29, 17))


def _differs_at_sample_points(diff: Any) -> bool:
    """True when ``diff`` is clearly non-zero at some point (so the two sides are different functions)."""
    symbols = sorted(diff.free_symbols, key=str)
    for k, value in enumerate(_SAMPLES):
        point = {sym: value + sympy.Rational(j * (k + 1), 7) for j, sym in enumerate(symbols)}
        try:
            number = complex(diff.subs(point).evalf(30))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            continue
        if abs(number) > 1e-12 and abs(number) != float("inf") and number == number:
            return True
    return False


def _scalar_equal(g: Any, p: Any, gold_dec: int | None, pred_dec: int | None, ctx: Context) -> bool:
    gv, pv = numeric(g), numeric(p)
    if gv is not None and pv is not None:
        golds = [(g, gv), (g / 100, gv / 100)] if ctx.gold_percent else [(g, gv)]
        preds = [(p, pv), (p / 100, pv / 100)] if ctx.pred_percent else [(p, pv)]
        for exact_g, a in golds:
            for exact_p, b in preds:
                # The numbers only rule out: values that agree to 40 digits are then compared exactly, so
                # 3^{100}+1 is not 3^{100} and \pi + 10^{-50} is not \pi.
                if abs(a - b) <= _REL_TOL * max(abs(a), abs(b)) and _exactly_equal(exact_g, exact_p):
                    return True
        if ctx.gold_percent or ctx.pred_percent or ctx.rounded_decimals is None:
            return False
        return _rounded(gv, g, gold_dec, pv, p, pred_dec, ctx.rounded_decimals)
    if isinstance(g, sympy.Expr) and isinstance(p, sympy.Expr):
        diff = sympy.expand(g - p)
        if diff == 0:
            return True
        if diff.has(sympy.Sum, sympy.Product, sympy.Integral, sympy.Derivative, sympy.Limit):
            return False  # unevaluated operators compare by form (after expansion), never by evaluating them
        if _differs_at_sample_points(diff):  # cheap and decisive: simplify() only for likely-equal pairs
            return False
        return bool(sympy.simplify(diff) == 0)
    return bool(g == p)


def _exactly_equal(g: Any, p: Any) -> bool:
    """Two closed-form numbers that agree to 40 digits: are they the same number?

    Exact arithmetic decides when it can (a non-zero rational difference is final). Otherwise the difference
    itself is evaluated, with up to ``_ZERO_DIGITS`` digits of working precision: a true zero leaves no
    significant digit (``0.e-800``), a real difference such as ``e^{-300}`` keeps all of its digits.
    """
    diff = g - p
    if diff == 0:
        return True
    diff = _rebuild(g) - _rebuild(p)  # the parser's unevaluated sums (15+2\sqrt{33} vs 2\sqrt{33}+15)
    if diff == 0:
        return True
    if diff.is_Rational:
        return False
    value = diff.evalf(_PREC, maxn=_ZERO_DIGITS)
    return all(part == 0 or getattr(part, "_prec", 2) <= 1 for part in value.as_real_imag())


def _rebuild(expr: Any) -> Any:
    """``expr`` rebuilt bottom-up with evaluation on, so equal values get SymPy's one canonical form."""
    return expr.func(*[_rebuild(a) for a in expr.args]) if expr.args else expr


def _rounded(
    gv: Any, g: Any, gold_dec: int | None, pv: Any, p: Any, pred_dec: int | None, minimum: int
) -> bool:
    """The lenient ``rounded_decimals`` option (``numbers.agree_when_rounded``) for real closed forms."""
    if not (gv.is_real and pv.is_real):
        return False
    return agree_when_rounded(_fraction(g, gv), gold_dec, _fraction(p, pv), pred_dec, minimum)


def _fraction(exact: Any, value: Any) -> Fraction:
    if exact.is_Rational:
        return Fraction(int(exact.p), int(exact.q))
    return Fraction(str(sympy.Float(value, _PREC)))  # an irrational at 60 digits: rounding ties cannot occur


def _matrix_equal(g: Any, p: Any, pred_dec: int | None, ctx: Context) -> bool:
    if g.shape != p.shape:
        return False
    return all(_scalar_equal(a, b, None, pred_dec, ctx) for a, b in zip(g, p, strict=True))


def _rel_expr(rel: Relation) -> tuple[str, Any] | None:
    """``lhs op rhs`` as ``(op, lhs - rhs)`` with ``<``/``\\le`` flipped to ``>``/``\\ge``."""
    rel = flip(rel)
    if len(rel.ops) != 1 or not all(isinstance(p, Leaf) for p in rel.parts):
        return None
    lhs, rhs = (to_sympy(p.text) for p in rel.parts if isinstance(p, Leaf))
    if not isinstance(lhs, sympy.Expr) or not isinstance(rhs, sympy.Expr):
        return None
    return rel.ops[0], lhs - rhs


def _constant_ratio(a: Any, b: Any) -> Any:
    """``a / b`` when it is a constant (the same relation up to scaling), else None."""
    if b == 0:
        return None
    ratio = sympy.cancel(sympy.together(a / b))  # rational functions: exact and fast
    if not ratio.free_symbols:
        return ratio
    if _differs_at_sample_points(ratio - ratio.subs({s: s + 1 for s in ratio.free_symbols})):
        return None
    ratio = sympy.simplify(ratio)
    return None if ratio.free_symbols else ratio


class SymbolicJudge(FastJudge):
    """The fast rules first, SymPy for whatever they cannot settle."""

    def leaf(self, gold: str, pred: str, ctx: Context) -> bool:
        try:
            return super().leaf(gold, pred, ctx)
        except NeedsSymbolic:
            pass
        g, p = to_sympy(gold), to_sympy(pred)
        if g is None:
            raise UngradableGold(gold)
        if p is None:
            return False
        if isinstance(g, sympy.MatrixBase) or isinstance(p, sympy.MatrixBase):
            return (
                isinstance(g, sympy.MatrixBase)
                and isinstance(p, sympy.MatrixBase)
                and _matrix_equal(g, p, _stated_decimals(pred), ctx)
            )
        return _scalar_equal(g, p, _gold_decimals(gold), _stated_decimals(pred), ctx)

    def relation(self, gold: Relation, pred: Relation, ctx: Context) -> bool:
        try:
            return FastJudge().relation(gold, pred, ctx)
        except NeedsSymbolic:
            pass
        if len(gold.ops) > 1 or len(pred.ops) > 1:  # chains "f(2) < f(1) < f(4)": part by part
            return gold.ops == pred.ops and all(
                equal(g, p, self, ctx) for g, p in zip(gold.parts, pred.parts, strict=True)
            )
        ge, pe = _rel_expr(gold), _rel_expr(pred)
        if ge is None or pe is None:
            return False
        (gop, gd), (pop, pd) = ge, pe
        if gop in ("=", "\\ne") and gop == pop:
            ratio = _constant_ratio(gd, pd)
            return ratio is not None and ratio != 0
        if gop in (">", "\\ge") and gop == pop:
            ratio = _constant_ratio(gd, pd)
            return ratio is not None and bool(ratio.is_positive)
        return False


def warm_up() -> None:
    """Run the parser and the comparison once so the first real request does not pay ANTLR's cold caches."""
    pairs = (
        ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2"),
        ("x^2+1", "1+x^{2}"),
        ("(1,2]", "(1, 2]"),
        ("\\sin^2 x", "1-\\cos^2 x"),
        ("2x+4y-3=0", "y=-\\frac{1}{2}x+\\frac{3}{4}"),
        (
            "\\begin{pmatrix}1 & 0 \\\\ 0 & \\frac{1}{2}\\end{pmatrix}",
            "\\begin{pmatrix}1 & 0 \\\\ 0 & 0.5\\end{pmatrix}",
        ),
        ("f(x)", "f(y)"),
        ("(9+1)", "10"),
        ("x_{1}=10^{\\frac{-5+\\sqrt{13}}{6}}", "x_1 = 10^{-\\frac{5 + \\sqrt{13}}{6}}"),
        ("F_n = \\sum_{k=0}^{n-1} F_k F_{n-k-1}", "F_n = \\sum_{k=1}^{n} F_{k}"),
        ("\\tan^2(y)+1", "\\sec^2(y)"),
    )
    for gold, pred in pairs:
        judge(parse(gold), parse(pred), Context())
    to_sympy.cache_clear()


def judge(gold: Any, pred: Any, ctx: Context) -> bool:
    """Full policy with SymPy leaves (runs inside the worker)."""
    return equal(gold, pred, SymbolicJudge(), ctx)
