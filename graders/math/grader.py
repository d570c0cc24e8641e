"""``MathGrader``: extraction mode -> normalisation -> fast exact path -> budgeted SymPy worker."""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from dataclasses import asdict, replace
from fractions import Fraction
from typing import Any, cast

from graders.math.compare import GOLD_UNREADABLE, Context, FastJudge, NeedsSymbolic, equal, squash, text_form
from graders.math.extract import (
    MODES,
    Extraction,
    Mode,
    UnclosedThinkError,
    after_think,
    extract,
    gold_answers,
    prose_gold,
)
from graders.math.guards import MAX_ANSWER_CHARS, unsafe
from graders.math.normalize import Cleaned, clean
from graders.math.numbers import parse_number
from graders.math.structure import Node, TooManyItems, leaves, parse
from graders.math.worker import WorkerCrashed, WorkerPool, WorkerTimeout
from graders.types import Grade

MAX_DISTINCT_ANSWERS = 32
MAX_RAW_ANSWER_CHARS = 5000
_BIG_INT = re.compile(r"[+-]?\d+")


class _Unjudgeable(Exception):
    """No verdict by comparison: the budget is spent, a guard predicts it would be, or a helper failed.

    ``by_response`` says whose doing it was (see ``Grade``): the prediction's (``incorrect``) or the gold's and
    the infrastructure's (``error``).
    """

    def __init__(self, cause: str, reason: str, *, by_response: bool) -> None:
        super().__init__(cause)
        self.cause = cause
        self.reason = reason
        self.by_response = by_response


def _prediction_fault(cause: str, reason: str = "answer too expensive to judge") -> _Unjudgeable:
    return _Unjudgeable(cause, reason, by_response=True)


def _infrastructure_fault(cause: str, reason: str) -> _Unjudgeable:
    return _Unjudgeable(cause, reason, by_response=False)


class MathGrader:
    """Checks a final mathematical answer against a reference.

    Options: ``mode`` (``strict``: boxed answers after ``</think>`` only, several non-equivalent boxes score 0;
    ``lenient``: also answer phrases, ``####``, last maths segment / number, MCQ letters) and ``timeout_s``
    (hard wall-clock budget per grade, default 2 s, enforced by killable worker processes, so it also holds
    when called from threads).

    Verdicts follow the rule in ``graders.types.Grade``. What the prediction causes is ``incorrect`` with the
    reason: an answer that trips the expression guards (exponent towers, huge powers or factorials, thousands
    of digits, over-long answers), nests too deeply, or alone exhausts the SymPy budget (``timeout``) or its
    memory (``memory``); details carry ``response_fault: true`` and the ``cause``. ``error`` is left for a gold
    that cannot be judged (too long, guarded, too deep), a SymPy helper that could not start or was saturated
    by concurrent callers, and grader bugs. ``mask_response_faults=True`` turns response faults back into
    ``error`` (the old behaviour) for a run that wants it.
    """

    name = "math"
    version = "2.0.0"

    def __init__(self, max_workers: int = 4) -> None:
        self.pool = WorkerPool(max_workers=max_workers)
        self._busy = 0  # SymPy calls in flight: a time-out while every helper was taken may be load
        self._busy_lock = threading.Lock()
        self._gold_cost: dict[str, bool] = {}  # gold text -> its own share alone exceeds a grade's budget

    def warm(self) -> None:
        """Start one SymPy helper now (the grading runtime calls this before a worker takes samples), so its
        start-up never counts against the first grade's budget."""
        self.pool.warm(1)

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError for bad options (``rrl grade`` asks once, before grading any row)."""
        unknown = sorted(set(options) - {"mode", "timeout_s", "mask_response_faults", "rounded_decimals"})
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown}; the math grader takes mode, timeout_s, rounded_decimals and "
                "mask_response_faults"
            )
        mode = options.get("mode", "strict")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        timeout_s = options.get("timeout_s", 2.0)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number, got {timeout_s!r}")
        rounded = options.get("rounded_decimals")
        if rounded is not None and (
            mode != "lenient"
            or isinstance(rounded, bool)
            or not isinstance(rounded, int)
            or not 1 <= rounded <= 50
        ):
            raise ValueError(
                f"rounded_decimals must be an integer from 1 to 50 and needs mode='lenient', got "
                f"{rounded!r} with mode={mode!r}"
            )
        if not isinstance(options.get("mask_response_faults", False), bool):
            raise ValueError("mask_response_faults must be true or false")

    def grade(
        self,
        response: str,
        ground_truth: Any,
        *,
        mode: str = "strict",
        timeout_s: float = 2.0,
        mask_response_faults: bool = False,
        rounded_decimals: int | None = None,
        **options: Any,
    ) -> Grade:
        every = {
            "mode": mode,
            "timeout_s": timeout_s,
            "mask_response_faults": mask_response_faults,
            "rounded_decimals": rounded_decimals,
            **options,
        }
        refused = Grade.refused_call(self.check_options, every, response)
        if refused is not None:
            return refused
        kind = _gold_kind_problem(ground_truth)
        if kind is not None:
            return Grade.error(kind)
        deadline = time.monotonic() + float(timeout_s)
        try:
            policy = Context(rounded_decimals=rounded_decimals, chains_must_hold=mode == "strict")
            return self._grade(response, str(ground_truth), mode, deadline, policy)
        except _Unjudgeable as exc:
            if exc.by_response:
                return Grade.response_fault(exc.reason, mask=mask_response_faults, mode=mode, cause=exc.cause)
            return Grade.error(exc.reason, mode=mode, cause=exc.cause)
        except RecursionError:  # both sides parsed alone; what overflows here is the prediction's shape
            return Grade.response_fault(
                "answer too deeply nested to judge", mask=mask_response_faults, mode=mode
            )
        except Exception as exc:  # a grader bug must cost one sample, never the caller's training run
            reason = f"internal error: {type(exc).__name__}: {exc}"
            if _gold_judges_itself(str(ground_truth)):
                # The gold alone is sound, so the response drove the grader into the bug: a masked ``error``
                # would let an answer pick "no penalty" for itself, so it is the response's fault.
                return Grade.response_fault(reason, mask=mask_response_faults, mode=mode, cause="grader bug")
            return Grade.error(reason, mode=mode)

    def check_gold(self, ground_truth: Any) -> str | None:
        """Why no answer can be judged against ``ground_truth``, or None: the gold's own share of every grade
        (its type, length, extraction, shape, and each leaf read by the fast rules or, in a helper, SymPy). The
        grading runtime asks it when a run's data loads (``graders.runtime.gold_problems``), so a gold like
        ``\\frac{`` is found there, not as samples graded ``error`` or, without an answer, ``incorrect``."""
        problem = _gold_kind_problem(ground_truth)
        gold = _prepared_gold(str(ground_truth)) if problem is None else problem
        if isinstance(gold, str):
            return gold
        try:
            parts = [leaf.text for leaf in leaves(parse(gold.text))]
        except TooManyItems:
            return "ground truth has too many items to judge"
        except RecursionError:
            return "ground truth too deeply nested"
        symbolic = [text for text in parts if _needs_sympy(text)]
        if symbolic and unsafe(gold.text):
            return "ground truth too expensive to judge"
        for text in symbolic:
            try:
                reply = self.pool.run({"gold": text, "readable": True}, _PROBE_BUDGET_S)
            except (WorkerTimeout, WorkerCrashed):
                continue  # cannot tell here (load, helpers): grading reports it per sample, never a drop
            if not reply.get("readable", True):
                return f"{GOLD_UNREADABLE}: {text[:80]}"
        return None

    def release(self) -> None:
        """Stop the idle SymPy helpers (``check_gold``'s, in a process that grades nothing itself); a later
        grade starts them again."""
        self.pool.close()

    def _grade(self, response: str, ground_truth: str, mode: str, deadline: float, policy: Context) -> Grade:
        gold = _prepared_gold(ground_truth)
        if isinstance(gold, str):
            return Grade.error(gold)
        details: dict[str, Any] = {"mode": mode, "gold": gold.text}
        try:
            text = after_think(response)
        except UnclosedThinkError:
            return Grade.incorrect("unclosed <think>: no final answer", no_answer=True, **details)
        found: Extraction = extract(text, cast(Mode, mode))
        details["rule"] = found.rule
        if not found.answers:  # no_answer: the cue for a fallback grader (graders.compose)
            return Grade.incorrect(found.rule, no_answer=True, **details)
        too_long = [a for a in found.answers if len(a) > MAX_RAW_ANSWER_CHARS]
        if too_long:  # normalising megabytes is itself the attack; only a verbatim copy of the gold passes
            if all(squash(a) == squash(ground_truth) for a in found.answers):
                return Grade.correct("verbatim", **details)
            raise _prediction_fault(f"answer longer than {MAX_RAW_ANSWER_CHARS} characters")
        preds = [clean(a) for a in found.answers]
        details["extracted"] = [p.text for p in preds][:MAX_DISTINCT_ANSWERS]
        if any(not p.text for p in preds):
            return Grade.incorrect("empty answer", **details)
        distinct = list({squash(p.text): p for p in preds}.values())
        if len(distinct) > MAX_DISTINCT_ANSWERS:
            return Grade.incorrect(f"{len(distinct)} different answers (hedging)", **details)
        if len(distinct) == 1:
            ok, how = self._equal(gold, distinct[0], deadline, policy)
            details["matched_by"] = how
            return (
                Grade.correct("equivalent", **details) if ok else Grade.incorrect("not equivalent", **details)
            )
        # Several different boxes: right only if together they are the (multi-part) gold answer,
        # or each of them is (equivalent spellings); otherwise it is hedging.
        ok, how = self._equal(gold, _combine(distinct), deadline, policy)
        if not ok:
            ok = True
            for p in distinct:
                one, how = self._equal(gold, p, deadline, policy)
                if not one:
                    ok = False
                    break
        details["matched_by"] = how
        if ok:
            return Grade.correct("equivalent", **details)
        return Grade.incorrect(f"hedging: {len(distinct)} different answers", **details)

    def _equal(self, gold: Cleaned, pred: Cleaned, deadline: float, policy: Context) -> tuple[bool, str]:
        """Equivalence of two cleaned answers and which path decided it (unit / fast / string / sympy)."""
        if gold.unit and pred.unit and gold.unit != pred.unit:
            return False, "unit"  # "5 m" does not answer "5 cm": no unit conversion
        if squash(gold.text) == squash(pred.text) and gold.percent == pred.percent:
            return True, "string"
        if (
            _BIG_INT.fullmatch(gold.text)
            and _BIG_INT.fullmatch(pred.text)
            and not (gold.percent or pred.percent)
        ):
            return _int_text(gold.text) == _int_text(pred.text), "integer"
        gold_reason, pred_reason = unsafe(gold.text), unsafe(pred.text)
        if gold_reason and len(gold.text) > MAX_ANSWER_CHARS:
            raise _infrastructure_fault(gold_reason, "ground truth too expensive to judge")
        if pred_reason and len(pred.text) > MAX_ANSWER_CHARS:
            raise _prediction_fault(pred_reason)
        ctx = replace(policy, gold_percent=gold.percent, pred_percent=pred.percent)
        gold_node = _parsed(gold.text, by_response=False)
        pred_node = _parsed(pred.text, by_response=True)
        try:
            return equal(gold_node, pred_node, FastJudge(), ctx), "fast"
        except NeedsSymbolic:
            pass
        except RecursionError as exc:  # the gold parsed on its own, so the depth is the prediction's
            raise _prediction_fault("answer too deeply nested", "answer too deeply nested to judge") from exc
        if gold_reason:
            raise _infrastructure_fault(gold_reason, "ground truth too expensive to judge")
        if pred_reason:
            raise _prediction_fault(pred_reason)
        return self._symbolic(gold, pred, deadline, ctx), "sympy"

    def _symbolic(self, gold: Cleaned, pred: Cleaned, deadline: float, ctx: Context) -> bool:
        """SymPy's verdict from a helper process, within what is left of the budget.

        The gold passed the guards, so a helper that runs out of time or memory was spent on the prediction:
        that is the prediction's fault, unless every helper was already taken when the call was made (the
        time may then have gone to waiting, which is load, not the answer).
        """
        left = deadline - time.monotonic()
        if left <= 0:
            raise _prediction_fault("budget spent before SymPy could start", "timeout")
        request = {
            "gold": gold.text,
            "pred": pred.text,
            "context": asdict(ctx),
        }
        with self._busy_lock:
            saturated = self._busy >= self.pool.max_workers
            self._busy += 1
        started = time.monotonic()
        try:
            reply = self.pool.run(request, left)
        except WorkerTimeout as exc:
            if saturated:
                raise _infrastructure_fault(
                    "every SymPy helper was busy", "timeout: grader saturated"
                ) from exc
            # Waiting for a helper that is still starting does not count against the budget, so only a wait as
            # long as the start-up limit itself means that no helper could start.
            if time.monotonic() - started >= self.pool.startup_timeout_s:
                raise _infrastructure_fault(
                    "SymPy helper did not start", "could not judge: no helper"
                ) from exc
            if self._gold_too_expensive(gold.text, left):
                raise _infrastructure_fault(
                    "the gold alone exhausts the budget", "ground truth too expensive to judge"
                ) from exc
            raise _prediction_fault("budget exhausted", "timeout") from exc
        except WorkerCrashed as exc:
            if not self._helpers_work():
                raise _infrastructure_fault(
                    "SymPy helpers crash on start", "could not judge: no helper"
                ) from exc
            raise _prediction_fault("worker died (memory limit)", "memory") from exc
        finally:
            with self._busy_lock:
                self._busy -= 1
        if not reply.get("ok"):
            error = str(reply.get("error", "worker error"))
            if error in ("memory", "timeout"):
                raise _prediction_fault(error, error)
            if error == "expression too deeply nested":
                raise _prediction_fault(error, "answer too deeply nested to judge")
            if error != GOLD_UNREADABLE and self._helper_judges_gold(gold.text, ctx):
                raise _prediction_fault(error, f"could not judge the answer: {error}")  # the answer broke it
            raise _infrastructure_fault(error, f"could not judge: {error}")
        return bool(reply["equal"])

    def _helper_judges_gold(self, gold: str, ctx: Context) -> bool:
        """After a helper failed on a pair: does it judge the gold against itself? (Then the prediction made it
        fail; if not, the gold or the helpers are at fault and the verdict is ``error``.)"""
        itself = {"gold": gold, "pred": gold, "context": asdict(replace(ctx, pred_percent=ctx.gold_percent))}
        try:
            return all(
                self.pool.run(request, _PROBE_BUDGET_S).get("ok")
                for request in ({"gold": gold, "gold_only": True}, itself)
            )
        except (WorkerTimeout, WorkerCrashed):
            return False

    def _gold_too_expensive(self, gold: str, budget_s: float) -> bool:
        """After a time-out: does the gold's own share of the work (parse, expand, evaluate) fit the budget the
        pair had? Remembered per gold (RL grades many samples against one)."""
        known = self._gold_cost.get(gold)
        if known is None and not any(_needs_sympy(leaf.text) for leaf in leaves(parse(gold))):
            known = False  # numbers and words only: nothing in the gold can be expensive
        if known is None:
            try:
                known = not self.pool.run({"gold": gold, "gold_only": True}, budget_s).get("ok")
            except (WorkerTimeout, WorkerCrashed):
                known = True
            if len(self._gold_cost) >= 4096:
                self._gold_cost.clear()
            self._gold_cost[gold] = known
        return known

    def _helpers_work(self) -> bool:
        """After a helper died on an answer: does a fresh one judge a trivial request? (If not, the helpers
        are broken, and blaming the answer would turn an outage into silent zero rewards.)"""
        try:
            return bool(self.pool.run(_PROBE, _PROBE_BUDGET_S).get("ok"))
        except (WorkerTimeout, WorkerCrashed):
            return False


_PROBE = {"gold": "x+1", "pred": "1+x", "context": asdict(Context())}
_PROBE_BUDGET_S = 10.0


def _gold_kind_problem(ground_truth: Any) -> str | None:
    """Why ``ground_truth`` is no gold at all (not a string or a number, or a non-finite number), or None."""
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, str | int | float | Fraction):
        return f"ground_truth must be a string or a number, got {type(ground_truth).__name__}"
    if isinstance(ground_truth, float) and not math.isfinite(ground_truth):  # e.g. an empty pandas cell
        return f"ground_truth is {ground_truth!r}, not a number any answer can equal"
    return None


def _prepared_gold(ground_truth: str) -> Cleaned | str:
    """The gold as every comparison sees it (its answers extracted, cleaned, combined), or why it is unusable."""
    if len(ground_truth) > 100 * MAX_RAW_ANSWER_CHARS:
        return f"ground truth longer than {100 * MAX_RAW_ANSWER_CHARS} characters"
    raw_golds = gold_answers(ground_truth)
    if any(len(g) > MAX_RAW_ANSWER_CHARS for g in raw_golds):
        return f"ground-truth answer longer than {MAX_RAW_ANSWER_CHARS} characters"
    golds = [g for g in (clean(raw) for raw in raw_golds) if g.text]
    if not golds:
        return "ground truth is empty"
    gold = _combine(golds)
    prose = prose_gold(gold.text)  # a worked solution or sentence, not an answer: never graded as incorrect
    return gold if prose is None else f"ground truth cannot be judged: {prose}"


def _needs_sympy(text: str) -> bool:
    return parse_number(text) is None and text_form(text) is None


def _parsed(text: str, *, by_response: bool) -> Node:
    """The shape of one side; too deep to parse is that side's fault (the gold's is an ungradable truth)."""
    try:
        return parse(text)
    except TooManyItems as exc:
        if by_response:
            raise _prediction_fault(str(exc), "answer has too many items to judge") from exc
        raise _infrastructure_fault(str(exc), "ground truth has too many items to judge") from exc
    except RecursionError as exc:
        if by_response:
            raise _prediction_fault("answer too deeply nested", "answer too deeply nested to judge") from exc
        raise _infrastructure_fault(
            "ground truth too deeply nested", "ground truth too deeply nested"
        ) from exc


def _gold_judges_itself(ground_truth: str) -> bool:
    """Does the gold go through every in-process step (extraction, cleaning, shapes, the fast judge) when
    judged against itself? Used after a grader bug to tell whose input drove the grader into it."""
    try:
        gold = _prepared_gold(ground_truth)
        if isinstance(gold, str):
            return False
        node = parse(gold.text)
        with contextlib.suppress(NeedsSymbolic):
            equal(node, node, FastJudge(), Context(gold_percent=gold.percent, pred_percent=gold.percent))
    except Exception:  # any failure here is the gold's (or the grader's), never the response's
        return False
    return True


def _int_text(s: str) -> str:
    sign = "-" if s.startswith("-") else ""
    digits = s.lstrip("+-").lstrip("0") or "0"
    return digits if digits == "0" else sign + digits


def _combine(answers: list[Cleaned]) -> Cleaned:
    """Several answers (boxes, gold parts) as one unordered list answer."""
    if len(answers) == 1:
        return answers[0]
    return Cleaned(", ".join(a.text for a in answers), any(a.percent for a in answers))
