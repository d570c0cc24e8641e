"""Trusted side of the result codec: the same allow-list the harness uses, plus equality on decoded values."""

from __future__ import annotations

import json
import math
from typing import Any

from graders.code._harness import Unserialisable, decode, encode

__all__ = ["Unserialisable", "call_key", "decode", "encode", "values_equal"]


def call_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A canonical string for one call's arguments (raises ``Unserialisable`` for unsupported types)."""
    return json.dumps([encode(list(args)), encode(kwargs)], sort_keys=True)


def values_equal(got: Any, expected: Any, float_tol: float | None) -> bool:
    """Equality of two trusted values; tuples match lists (JSON ground truth has no tuples); floats within
    ``float_tol`` (relative or absolute) when given. Both sides are plain decoded data, never submission objects."""
    if isinstance(got, tuple):
        got = list(got)
    if isinstance(expected, tuple):
        expected = list(expected)
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(got, float | int) and isinstance(expected, float | int):
        if float_tol is not None and (isinstance(got, float) or isinstance(expected, float)):
            return math.isclose(got, expected, rel_tol=float_tol, abs_tol=float_tol)
        return got == expected
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(values_equal(g, e, float_tol) for g, e in zip(got, expected, strict=True))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(values_equal(got[k], expected[k], float_tol) for k in got)
    return type(got) is type(expected) and got == expected
