"""Which ground truths a grader can judge at all, asked once when a run's data loads (not per sample).

A grader may offer ``check_gold(ground_truth) -> str | None`` (the reason no answer can be judged against it,
or None; thread-safe), and ``release()`` to free what the checks started; the math and gsm8k graders do. A grader without it accepts every gold. The caller (the trainer's
data loading) reaches the graders only through this function, by spec, like every other runtime call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graders.runtime.request import resolve_grader

THREADS = (
    4  # a grader's check_gold is called from several threads at once (as the math grader's grade may be)
)


def gold_problems(spec: str, golds: Sequence[Any]) -> dict[int, str]:
    """index -> why the grader behind ``spec`` cannot judge ``golds[index]``; empty when it judges them all
    (or has no ``check_gold``, or cannot be loaded: where the run loads its graders says why). Each distinct
    gold is checked once, ``THREADS`` at a time (the math grader's SymPy reads run in its helper processes)."""
    try:
        grader = resolve_grader(spec)
    except Exception:  # an unknown or broken grader is refused, naming it, where the run loads its graders
        return {}
    check = getattr(grader, "check_gold", None)
    if not callable(check):
        return {}
    keys = [json.dumps(gold, sort_keys=True, default=repr) for gold in golds]
    first = {key: i for i, key in reversed(list(enumerate(keys)))}  # each distinct gold's first index
    try:
        with ThreadPoolExecutor(THREADS) as threads:
            found = dict(zip(first, threads.map(lambda i: check(golds[i]), first.values()), strict=True))
    finally:
        release = getattr(grader, "release", None)
        if callable(release):  # the caller (the trainer's driver) grades nothing itself: free the helpers
            release()
    return {i: str(found[key]) for i, key in enumerate(keys) if found[key] is not None}
