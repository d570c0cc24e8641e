"""The worker's side of one judgement: rebuild the shapes and run the full policy with SymPy leaves."""

from __future__ import annotations

import contextlib
from typing import Any

import sympy

from graders.math.compare import GOLD_UNREADABLE, Context
from graders.math.structure import leaves, parse
from graders.math.symbolic import UngradableGold, judge, numeric, to_sympy, warm_up

__all__ = ["answer", "warm_up"]


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """``{"gold", "pred", "context": <Context fields>}`` -> ``{"ok": True, "equal": bool}``.

    ``{"gold", "gold_only": True}`` does the gold's own share of a judgement (parse, expand and evaluate each
    leaf): the grader asks it after a time-out, to tell a gold that cannot be judged from a prediction that
    spent the budget. ``{"gold", "readable": True}`` -> ``{"ok": True, "readable": bool}``: whether SymPy reads
    one gold leaf (``MathGrader.check_gold``).
    """
    if request.get("readable"):  # MathGrader.check_gold: can SymPy read this gold leaf at all?
        return {"ok": True, "readable": to_sympy(request["gold"]) is not None}
    if request.get("gold_only"):
        for leaf in leaves(parse(request["gold"])):
            expr = to_sympy(leaf.text)
            if isinstance(expr, sympy.Expr):
                with contextlib.suppress(ValueError, TypeError, ArithmeticError, NotImplementedError):
                    sympy.expand(expr)  # what SymPy cannot do is cheap to refuse; only the time counts here
                    numeric(expr)
        return {"ok": True, "equal": True}
    ctx = Context(**request.get("context", {}))
    try:
        equal = judge(parse(request["gold"]), parse(request["pred"]), ctx)
    except RecursionError:
        return {"ok": False, "error": "expression too deeply nested"}  # the caller: the prediction's fault
    except UngradableGold:
        return {
            "ok": False,
            "error": GOLD_UNREADABLE,
        }  # the caller: an error (not the answer's)
    except (ValueError, TypeError, ArithmeticError, NotImplementedError) as exc:
        # SymPy raises these for things it cannot decide (e.g. comparing a set with a number): not equal.
        return {"ok": True, "equal": False, "note": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return {"ok": True, "equal": bool(equal)}
