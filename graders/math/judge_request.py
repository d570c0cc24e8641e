"""The worker's side of one judgement: rebuild the shapes and run the full policy with SymPy leaves."""

from __future__ import annotations

from typing import Any

from graders.math.compare import Context
from graders.math.structure import parse
from graders.math.symbolic import judge, warm_up

__all__ = ["answer", "warm_up"]


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """``{"gold", "pred", "gold_percent", "pred_percent", "rounded_decimals"}`` -> ``{"ok": True, "equal": bool}``."""
    rounded = request.get("rounded_decimals")
    ctx = Context(bool(request.get("gold_percent")), bool(request.get("pred_percent")),
                  int(rounded) if rounded is not None else None)  # fmt: skip
    try:
        equal = judge(parse(request["gold"]), parse(request["pred"]), ctx)
    except RecursionError:
        return {"ok": False, "error": "expression too deeply nested"}  # the caller reports it as an error
    except (ValueError, TypeError, ArithmeticError, NotImplementedError) as exc:
        # SymPy raises these for things it cannot decide (e.g. comparing a set with a number): not equal.
        return {"ok": True, "equal": False, "note": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return {"ok": True, "equal": bool(equal)}
