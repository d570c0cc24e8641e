"""The code grader's assert checks in warm helper processes that the grader kills at the grade's deadline.

The checks are trusted dataset code, but the values they work on are the submission's answers, and one C call
driven by such a value (``sum(range(candidate(1)))``, ``x ** candidate(2)``, a regex backtrack on a returned
string, ``sorted`` of a huge returned list) cannot be stopped by the checks' trace-function deadline. So each
pass of ``graders.code.asserts.AssertRun`` runs in a ``HelperPool`` child: the in-process deadline still ends
Python-level run-aways with the check's own verdict, and the caller SIGKILLs the helper when the deadline
(plus ``GRACE_S``) has passed, which is the answer's time-out. The helper's address-space limit turns a
memory blow-up into the check's ``MemoryError`` (or a crash), never the host's.

Request: ``{"suite": <AssertSuite fields>, "outcomes": {call key: sandbox outcome}, "pass": "record"|"judge",
"budget_s": seconds}``; the budget starts when the helper reads the request, as the caller's kill deadline
starts once it has a helper (a helper still starting is not the answer's time).
Reply: ``{"ok": True, "calls": [[key, args, kwargs], ...] (encoded), "verdicts": [None | [type, message]]}``,
or ``{"ok": True, "ground_truth": why}`` when the suite itself cannot be run.
"""

from __future__ import annotations

import time
from typing import Any

from graders.code.asserts import AssertRun
from graders.code.suites import AssertSuite
from graders.code.values import Unserialisable, call_key, encode
from graders.runtime.helper_pool import HelperPool, serve

MEMORY_LIMIT_BYTES = 2 * 1024**3
GRACE_S = 0.5  # past the deadline, the in-process tracer had its chance: the helper is killed
_MESSAGE_CAP = 300


class CheckPool(HelperPool):
    """Warm check helpers (see ``HelperPool``), started on first use."""

    def __init__(self, max_workers: int = 8) -> None:
        super().__init__("graders.code.check_worker", max_workers)


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """One pass of the checks over the outcomes known so far (see the module docstring)."""
    if request.get("probe"):
        return {"ok": True}
    fields = request["suite"]
    suite = AssertSuite(
        fields["entry_point"], fields["setup"], tuple(fields["programs"]), fields["call_check"]
    )
    run = AssertRun(suite, time.monotonic() + float(request["budget_s"]))
    for key, outcome in request["outcomes"].items():
        run.table.add(key, outcome)
    verdicts: list[BaseException | None] = []
    try:
        if request["pass"] == "record":
            calls = run.record()
        else:
            verdicts, calls = run.judge()
    except (SyntaxError, ValueError) as exc:
        return {"ok": True, "ground_truth": f"test code is not Python: {exc}"}
    try:
        encoded = [[call_key(a, k), encode(list(a)), encode(k)] for a, k in calls]
    except Unserialisable as exc:
        return {"ok": True, "ground_truth": f"the check passes an unsupported argument type ({exc})"}
    return {"ok": True, "calls": encoded, "verdicts": [_described(v) for v in verdicts]}


def _described(verdict: BaseException | None) -> list[str] | None:
    if verdict is None:
        return None
    try:
        message = str(verdict)[:_MESSAGE_CAP]
    except Exception:  # noqa: BLE001 - an exception whose message cannot be built still failed the test
        message = "(no message)"
    return [type(verdict).__name__, message]


if __name__ == "__main__":
    serve(answer, MEMORY_LIMIT_BYTES)
