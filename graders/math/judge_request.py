"""The worker's side of one judgement: rebuild the shapes and run the full policy with SymPy leaves."""

from __future__ import annotations

from typing import Any

from graders.math.compare import Context
from graders.math.structure import parse
from graders.math.symbolic import judge, warm_up

__all__ = ["answer", "warm_up"]


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """``{"gold", "pred", "context": <Context fields>}`` -> ``{"ok": True, "equal": bool}``."""
    ctx = Context(**request.get("context", {}))
    try:
        equal = judge(parse(request["gold"]), parse(request["pred"]), ctx)
    except RecursionError:
        return {"ok": False, "error": "expression too deeply nested"}  # the caller: the prediction's fault
    except (ValueError, TypeError, ArithmeticError, NotImplementedError) as exc:
        # SymPy raises these for things it cannot decide (e.g. comparing a set with a number): not equal.
        return {"ok": True, "equal": False, "note": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return {"ok": True, "equal": bool(equal)}
