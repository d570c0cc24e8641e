"""Which ground truths a grader can judge at all, asked once when a run's data loads (not per sample).

A grader may offer ``check_gold(ground_truth) -> str | None`` (the reason no answer can be judged against it,
or None); the math and gsm8k graders do. A grader without it accepts every gold. The caller (the trainer's
data loading) reaches the graders only through this function, by spec, like every other runtime call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from graders.runtime.request import resolve_grader


def gold_problems(spec: str, golds: Sequence[Any]) -> dict[int, str]:
    """index -> why the grader behind ``spec`` cannot judge ``golds[index]``; empty when it judges them all
    (or has no ``check_gold``, or cannot be loaded: where the run loads its graders says why). Each distinct
    gold is checked once."""
    try:
        grader = resolve_grader(spec)
    except Exception:  # an unknown or broken grader is refused, naming it, where the run loads its graders
        return {}
    check = getattr(grader, "check_gold", None)
    if not callable(check):
        return {}
    seen: dict[str, str | None] = {}
    out: dict[int, str] = {}
    for i, gold in enumerate(golds):
        key = json.dumps(gold, sort_keys=True, default=repr)
        if key not in seen:
            seen[key] = check(gold)
        if seen[key] is not None:
            out[i] = str(seen[key])
    return out
