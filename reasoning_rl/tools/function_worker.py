"""A killable warm worker for an isolated function tool (``tools/isolated.py``), served by the grading runtime's
helper pool: ``python -m reasoning_rl.tools.function_worker SYS_PATH MODULE QUALNAME`` imports the function once
(``SYS_PATH``: the owner's ``sys.path`` as JSON, so a function the owner could import, a test module's too, loads
here), then answers ``{"args": [...], "kwargs": {...}}`` requests with ``{"ok": true, "status": "ok" | "error",
"text": ...}`` until its owner leaves. Memory is capped (address space), so a memory bomb is a fast
``MemoryError``."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

from graders.runtime import serve

MEMORY_BYTES = 1 << 30  # address-space cap of a worker (sympy + its work fit well inside)


def resolve(module: str, qualname: str) -> Callable[..., Any]:
    """The function by its import path; a ``FunctionTool`` under that name (``@tool`` replaced it) gives its ``fn``."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return getattr(obj, "fn", obj)


def main(argv: list[str]) -> None:
    path, module, qualname = argv
    sys.path[:0] = [p for p in json.loads(path) if p not in sys.path]
    fn = resolve(module, qualname)

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"ok": True, "status": "ok", "text": str(fn(*request["args"], **request["kwargs"]))}
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - the function's failure goes back to the caller as text
            return {"ok": True, "status": "error", "text": f"{type(exc).__name__}: {exc}"}

    serve(answer, MEMORY_BYTES)


if __name__ == "__main__":
    main(sys.argv[1:])
