"""``MathGrader``: extraction mode -> normalisation -> fast exact path -> budgeted SymPy worker."""

from __future__ import annotations

import re
import time
from fractions import Fraction
from typing import Any, cast

from graders.math.compare import Context, FastJudge, NeedsSymbolic, equal, squash
from graders.math.extract import (
    MODES,
    Extraction,
    Mode,
    UnclosedThinkError,
    after_think,
    extract,
    gold_answers,
)
from graders.math.guards import MAX_ANSWER_CHARS, unsafe
from graders.math.normalize import Cleaned, clean
from graders.math.structure import parse
from graders.math.worker import WorkerCrashed, WorkerPool, WorkerTimeout
from graders.types import Grade

MAX_DISTINCT_ANSWERS = 32
MAX_RAW_ANSWER_CHARS = 5000
_BIG_INT = re.compile(r"[+-]?\d+")


class _Budget(Exception):
    """The grade's budget is spent (or a guard predicts it would be): verdict ``error``, not ``incorrect``."""

    def __init__(self, cause: str = "budget exhausted", reason: str = "timeout") -> None:
        super().__init__(cause)
        self.cause = cause
        self.reason = reason


class MathGrader:
    """Checks a final mathematical answer against a reference.

    Options: ``mode`` (``strict``: boxed answers after ``</think>`` only, several non-equivalent boxes score 0;
    ``lenient``: also answer phrases, ``####``, last maths segment / number, MCQ letters) and ``timeout_s``
    (hard wall-clock budget per grade, default 2 s, enforced by killable worker processes, so it also holds
    when called from threads). Exhausting it gives verdict ``error`` with reason ``timeout``.
    """

    name = "math"
    version = "1.0.0"

    def __init__(self, max_workers: int = 4) -> None:
        self.pool = WorkerPool(max_workers=max_workers)

    def warm(self) -> None:
        """Start one SymPy helper now (the grading runtime calls this before a worker takes samples), so its
        start-up never counts against the first grade's budget."""
        self.pool.warm(1)

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError for bad options (``rrl grade`` asks once, before grading any row)."""
        unknown = sorted(set(options) - {"mode", "timeout_s"})
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}; the math grader takes mode and timeout_s")
        mode = options.get("mode", "strict")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        timeout_s = options.get("timeout_s", 2.0)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")

    def grade(
        self,
        response: str,
        ground_truth: Any,
        *,
        mode: str = "strict",
        timeout_s: float = 2.0,
        **options: Any,
    ) -> Grade:
        try:
            self.check_options({"mode": mode, "timeout_s": timeout_s, **options})
        except ValueError as exc:
            return Grade.error(str(exc))
        if not isinstance(response, str):
            return Grade.error(f"response must be a string, got {type(response).__name__}")
        if isinstance(ground_truth, bool) or not isinstance(ground_truth, str | int | float | Fraction):
            return Grade.error(
                f"ground_truth must be a string or a number, got {type(ground_truth).__name__}"
            )
        deadline = time.monotonic() + float(timeout_s)
        try:
            return self._grade(response, str(ground_truth), mode, deadline)
        except _Budget as exc:
            return Grade.error(exc.reason, mode=mode, cause=exc.cause)
        except RecursionError:
            return Grade.error("answer too deeply nested to judge", mode=mode)
        except Exception as exc:  # a grader bug must cost one masked sample, never the caller's training run
            return Grade.error(f"internal error: {type(exc).__name__}: {exc}", mode=mode)

    def _grade(self, response: str, ground_truth: str, mode: str, deadline: float) -> Grade:
        if len(ground_truth) > 100 * MAX_RAW_ANSWER_CHARS:
            return Grade.error(f"ground truth longer than {100 * MAX_RAW_ANSWER_CHARS} characters")
        raw_golds = gold_answers(ground_truth)
        if any(len(g) > MAX_RAW_ANSWER_CHARS for g in raw_golds):
            return Grade.error(f"ground-truth answer longer than {MAX_RAW_ANSWER_CHARS} characters")
        golds = [clean(g) for g in raw_golds]
        golds = [g for g in golds if g.text]
        if not golds:
            return Grade.error("ground truth is empty")
        gold = _combine(golds)
        details: dict[str, Any] = {"mode": mode, "gold": gold.text}
        try:
            text = after_think(response)
        except UnclosedThinkError:
            return Grade.incorrect("unclosed <think>: no final answer", **details)
        found: Extraction = extract(text, cast(Mode, mode))
        details["rule"] = found.rule
        if not found.answers:
            return Grade.incorrect(found.rule, **details)
        too_long = [a for a in found.answers if len(a) > MAX_RAW_ANSWER_CHARS]
        if too_long:  # normalising megabytes is itself the attack; only a verbatim copy of the gold passes
            if all(squash(a) == squash(ground_truth) for a in found.answers):
                return Grade.correct("verbatim", **details)
            raise _Budget(f"answer longer than {MAX_RAW_ANSWER_CHARS} characters")
        preds = [clean(a) for a in found.answers]
        details["extracted"] = [p.text for p in preds][:MAX_DISTINCT_ANSWERS]
        if any(not p.text for p in preds):
            return Grade.incorrect("empty answer", **details)
        distinct = list({squash(p.text): p for p in preds}.values())
        if len(distinct) > MAX_DISTINCT_ANSWERS:
            return Grade.incorrect(f"{len(distinct)} different answers (hedging)", **details)
        if len(distinct) == 1:
            ok, how = self._equal(gold, distinct[0], deadline)
            details["matched_by"] = how
            return (
                Grade.correct("equivalent", **details) if ok else Grade.incorrect("not equivalent", **details)
            )
        # Several different boxes: right only if together they are the (multi-part) gold answer,
        # or each of them is (equivalent spellings); otherwise it is hedging.
        ok, how = self._equal(gold, _combine(distinct), deadline)
        if not ok:
            ok = True
            for p in distinct:
                one, how = self._equal(gold, p, deadline)
                if not one:
                    ok = False
                    break
        details["matched_by"] = how
        if ok:
            return Grade.correct("equivalent", **details)
        return Grade.incorrect(f"hedging: {len(distinct)} different answers", **details)

    def _equal(self, gold: Cleaned, pred: Cleaned, deadline: float) -> tuple[bool, str]:
        """Equivalence of two cleaned answers and which path decided it (fast / string / sympy)."""
        if squash(gold.text) == squash(pred.text) and gold.percent == pred.percent:
            return True, "string"
        if (
            _BIG_INT.fullmatch(gold.text)
            and _BIG_INT.fullmatch(pred.text)
            and not (gold.percent or pred.percent)
        ):
            return _int_text(gold.text) == _int_text(pred.text), "integer"
        reason = unsafe(gold.text) or unsafe(pred.text)
        if reason and (len(gold.text) > MAX_ANSWER_CHARS or len(pred.text) > MAX_ANSWER_CHARS):
            raise _Budget(reason)
        ctx = Context(gold.percent, pred.percent)
        gold_node, pred_node = parse(gold.text), parse(pred.text)
        try:
            return equal(gold_node, pred_node, FastJudge(), ctx), "fast"
        except NeedsSymbolic:
            pass
        if reason:
            raise _Budget(reason)
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Budget
        request = {
            "gold": gold.text,
            "pred": pred.text,
            "gold_percent": gold.percent,
            "pred_percent": pred.percent,
        }
        try:
            reply = self.pool.run(request, left)
        except WorkerTimeout as exc:
            raise _Budget from exc
        except WorkerCrashed as exc:
            raise _Budget("worker died (memory limit)", reason="memory") from exc
        if not reply.get("ok"):
            error = str(reply.get("error", "worker error"))
            raise _Budget(error, reason=error if error in ("memory", "timeout") else f"could not judge: {error}")
        return bool(reply["equal"]), "sympy"


def _int_text(s: str) -> str:
    sign = "-" if s.startswith("-") else ""
    digits = s.lstrip("+-").lstrip("0") or "0"
    return digits if digits == "0" else sign + digits


def _combine(answers: list[Cleaned]) -> Cleaned:
    """Several answers (boxes, gold parts) as one unordered list answer."""
    if len(answers) == 1:
        return answers[0]
    return Cleaned(", ".join(a.text for a in answers), any(a.percent for a in answers))
