"""JSON a user or a data row gives us (``rrl grade`` rows and ``--option`` values, training rows, a code row's
ground truth), parsed with limits: the one parser for it, so every reader refuses the same inputs the same way.

``json`` has no limits of its own: deep nesting raises ``RecursionError`` (or, below the recursion limit, makes
a value that JSON, pickle and our writers later fail on), and a long integer literal either raises a bare
``ValueError`` (Python's digit cap) or, with that cap lifted (``PYTHONINTMAXSTRDIGITS=0``), costs quadratic time.
Here each is an ``UntrustedJSONError`` with a one-line reason the caller prefixes with the option or row.
"""

from __future__ import annotations

import json
from typing import Any

# Far above any real row (chat messages with tool calls nest about 6 deep), far below Python's recursion limit.
MAX_DEPTH = 100
# Python's default cap on int <-> str conversion, made explicit so no environment variable can lift it.
MAX_INT_DIGITS = 4300
TOO_DEEP = f"is nested deeper than {MAX_DEPTH} levels (lists and objects)"


class UntrustedJSONError(ValueError):
    """Text that is not JSON, or JSON past a limit; the message is one line, without the text itself."""


class JSONLimitError(UntrustedJSONError):
    """JSON past a limit (too deep, an over-long integer): never read as anything else (a plain string)."""


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists/objects deeper than ``limit`` (iterative: a deep value cannot overflow it)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else ()
        )
        for child in children:
            if isinstance(child, (dict, list, tuple)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise JSONLimitError(f"holds an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def loads_untrusted(text: str) -> Any:
    """``text`` as JSON within ``MAX_DEPTH`` and ``MAX_INT_DIGITS``; ``UntrustedJSONError`` otherwise (its
    message reads after the thing's name: "row 3 " + "is not valid JSON: ...")."""
    try:
        value = json.loads(text, parse_int=_int)
    except json.JSONDecodeError as exc:
        # some messages end in "at" ("Unterminated string starting at"): no "at at column"
        raise UntrustedJSONError(
            f"is not valid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}"
        ) from None
    except RecursionError:
        raise JSONLimitError(TOO_DEEP) from None
    if (text.count("[") + text.count("{") > MAX_DEPTH) and too_deep(value):
        raise JSONLimitError(TOO_DEEP)
    return value
