"""What the sandboxed harness reports about each test, checked field by field before trusted code reads it.

The harness's reply as a whole carries the run's nonce, which no test process can have read. But inside a
test's child process the submission and the harness's per-test reporting code are one process: nothing there is
out of the submission's reach (it can read its own memory), so it can always write a result line of its own.
Such a line can only claim what the submission could have returned anyway; what made
it dangerous was its shape (``{"value": {"defaultdict": ""}}`` made the trusted comparison raise, which the
grading pool turns into a masked ``error``). So every outcome is checked here, whole: an unknown status or
field, a field of the wrong type, or a value or mutation that does not decode makes that test a ``malformed``
failure (``incorrect``), never an exception in trusted code.
"""

from __future__ import annotations

import json
from typing import Any

from graders.code.values import decode, decode_mutation

STATUSES = frozenset({"ok", "error", "crash", "timeout", "output_limit", "skipped"})
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "status": str,
    "stdout": str,
    "error": str,
    "exc_type": str,
    "exit_code": int,
    "time_s": (int, float),
}
_VALUES = ("value", "mutated")  # encoded submission data, checked by decoding


def parse_outcomes(stdout: bytes, n: int, nonce: str) -> list[dict[str, Any]] | None:
    """The harness's JSON as ``n`` checked outcomes; None when it is not the harness's reply at all (not
    JSON, or without this run's ``nonce``, which only the harness can have read: ``graders/code/_harness.py``)."""
    try:
        data = json.loads(stdout)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("nonce") != nonce:
        return None
    results = data.get("results")
    if not isinstance(results, list) or len(results) != n:
        return None
    return [checked(raw) for raw in results]


def checked(raw: Any) -> dict[str, Any]:
    """One outcome as reported, or a ``malformed`` failure saying what was wrong with it."""
    if not isinstance(raw, dict):
        return _malformed(f"an outcome is a {type(raw).__name__}, not an object")
    unknown = sorted(str(k)[:40] for k in set(raw) - set(_FIELDS) - set(_VALUES))
    if unknown:
        return _malformed(f"unknown outcome field(s) {unknown[:5]}")
    for key, kind in _FIELDS.items():
        if key in raw and (isinstance(raw[key], bool) or not isinstance(raw[key], kind)):
            return _malformed(f"outcome field {key!r} is a {type(raw[key]).__name__}")
    if raw.get("status") not in STATUSES:
        return _malformed(f"unknown status {str(raw.get('status'))[:40]!r}")
    try:
        if "value" in raw:
            decode(raw["value"])
        if "mutated" in raw:
            decode_mutation(raw["mutated"])
    except (ValueError, TypeError, RecursionError) as exc:
        return _malformed(f"unusable result: {str(exc)[:200]}", raw.get("time_s"))
    return raw


def _malformed(why: str, time_s: Any = None) -> dict[str, Any]:
    ok_time = isinstance(time_s, int | float) and not isinstance(time_s, bool)
    return {
        "status": "malformed",
        "error": f"malformed test outcome: {why}",
        "time_s": time_s if ok_time else 0.0,
    }
