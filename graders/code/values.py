"""Trusted side of the result codec: the allow-list the harness uses, a hash-flooding guard for values handed
to trusted check code, and equality of a submission's encoded result against a JSON expected value."""

from __future__ import annotations

import json
import math
from typing import Any

from graders.code._harness import MAX_DEPTH, MAX_SAME_HASH, Unserialisable, decode, encode

__all__ = [
    "HashSpread",
    "Unserialisable",
    "call_key",
    "decode",
    "decode_mutation",
    "encode",
    "encoded_equal",
    "values_equal",
]


def call_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A canonical string for one call's arguments (raises ``Unserialisable`` for unsupported types)."""
    return json.dumps([encode(list(args)), encode(kwargs)], sort_keys=True)


def decode_mutation(enc: Any) -> tuple[list[Any], dict[Any, Any]]:
    """A call's reported in-place changes, ``[args, kwargs]`` after the call; ValueError if not that shape."""
    mutated = decode(enc)
    if not (
        type(mutated) is list and len(mutated) == 2 and type(mutated[0]) is list and type(mutated[1]) is dict
    ):
        raise ValueError("malformed mutated arguments")
    return mutated[0], mutated[1]


class HashSpread:
    """Every int/float/complex/tuple/frozenset inside the values of one grade, bucketed by hash: trusted check
    code may put any of them in a set or dict (``set(candidate(x))``), which a submission could make O(n^2)
    with distinct values that hash alike. ``add`` raises ValueError on such a value; it costs O(size)."""

    def __init__(self) -> None:
        self._buckets: dict[int, list[Any]] = {}

    def add(self, value: Any) -> None:
        buckets, stack = self._buckets, [value]
        while stack:
            v = stack.pop()
            t = type(v)
            if t is list or t is set:
                stack.extend(v)
                continue
            if isinstance(v, dict):
                stack.extend(v.keys())
                stack.extend(v.values())
                continue
            if not (t is int or t is float or t is complex or isinstance(v, tuple | frozenset)):
                continue  # str/bytes hash randomly per process; None/bool are single values
            if isinstance(v, tuple | frozenset):
                stack.extend(v)
            try:
                h = hash(v)
            except TypeError:  # a tuple holding a list: no set or dict can hold it, nothing to count
                continue
            same = buckets.get(h)
            if same is None:
                buckets[h] = [v]  # keys are hash values: distinct keys hash apart
            elif not any(v is w or v == w for w in same):
                same.append(v)
                if len(same) > MAX_SAME_HASH:
                    raise ValueError("too many distinct values share one hash (a hash-flooding value)")


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
        return len(got) == len(expected) and all(
            values_equal(g, e, float_tol) for g, e in zip(got, expected, strict=True)
        )
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(
            values_equal(got[k], expected[k], float_tol) for k in got
        )
    return type(got) is type(expected) and got == expected


def encoded_equal(enc: Any, expected: Any, float_tol: float | None, depth: int = 0) -> bool:
    """``values_equal(decode(enc), expected)`` for a JSON ``expected`` (call-based ground truth), computed on the
    encoded form without building the submission's sets or dicts: no attacker-chosen value is ever hashed
    except dict keys that must be strings. Malformed encodings raise ValueError, as ``decode`` does."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if enc is None or type(enc) in (bool, str, int, float):
        return values_equal(enc, expected, float_tol)
    if type(enc) is list or (
        type(enc) is dict and len(enc) == 1 and next(iter(enc)) in ("tuple", "namedtuple")
    ):
        items = enc if isinstance(enc, list) else _tuple_items(enc)
        if isinstance(expected, tuple):
            expected = list(expected)
        if not isinstance(expected, list):
            return False
        return len(items) == len(expected) and all(
            encoded_equal(g, e, float_tol, depth + 1) for g, e in zip(items, expected, strict=True)
        )
    if type(enc) is dict and len(enc) == 1 and next(iter(enc)) in ("dict", "odict", "counter", "defaultdict"):
        tag, body = next(iter(enc.items()))
        return isinstance(expected, dict) and _mapping_equal(
            body[1] if tag == "defaultdict" else body, expected, float_tol, depth
        )
    return values_equal(
        decode(enc, depth), expected, float_tol
    )  # floats, bytes, complex, sets: small or unequal


def _tuple_items(enc: dict[str, Any]) -> list[Any]:
    tag, body = next(iter(enc.items()))
    items = body if tag == "tuple" else (body[2] if type(body) is list and len(body) == 3 else None)
    if type(items) is not list:
        raise ValueError(f"malformed {tag}")
    return items


def _mapping_equal(pairs: Any, expected: dict[str, Any], float_tol: float | None, depth: int) -> bool:
    if type(pairs) is not list:
        raise ValueError("malformed dict")
    seen: set[Any] = set()  # only keys equal to expected ones enter: their hashes are the ground truth's
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2:
            raise ValueError("malformed dict entry")
        key = pair[0] if type(pair[0]) is str else decode(pair[0], depth + 1)
        try:
            if key not in expected or key in seen:
                return False
        except TypeError as exc:
            raise ValueError("malformed dict key") from exc
        seen.add(key)
        if not encoded_equal(pair[1], expected[key], float_tol, depth + 1):
            return False
    return len(seen) == len(expected)
