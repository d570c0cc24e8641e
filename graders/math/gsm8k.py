"""``gsm8k``: verl's strict GSM8K format rule (the last ``#### N``) with the math grader's number comparison.

verl scores ``openai/gsm8k`` rows by the final ``#### <number>`` of the response only (its ``strict`` method:
no ``####``, no reward), so a model trained on verl's parquet answers that way and our default ``\\boxed{}``
rule would score it 0. Like verl, only the last 300 characters are searched and ``,``/``$`` are dropped from
the number; unlike verl's string equality, the number is compared by the math grader (``72.0`` is ``72``).
"""

from __future__ import annotations

import re
from typing import Any

from graders.math.extract import UnclosedThinkError, after_think
from graders.math.grader import MathGrader
from graders.types import Grade

# verl: re.findall("#### (\\-?[0-9\\.\\,]+)", solution_str[-300:]) and the last match.
_ANSWER = re.compile(r"#### (-?[0-9.,]+)")
# What may not follow that number: verl reads "#### 5-2" as 5 and "#### 7/2" as 7; we judge such a final
# answer malformed (incorrect) instead of guessing which part was meant (the number is read greedily, so
# only an operator, a bracket or a ratio can follow it).
_CONTINUED = re.compile(r"[ \t]*(?:[-+*/^=(×÷]|\\(?:frac|div|times|cdot)\b)|:\d")
CLIP_CHARS = 300


def final_answer(text: str) -> tuple[str | None, str]:
    """The number of the last ``#### N`` in the last 300 characters of ``text`` (verl's rule), or None and
    why not: no such answer, or one that goes on as an expression (``#### 5-2``, ``#### 7/2``)."""
    clipped = text[-CLIP_CHARS:]
    matches = list(_ANSWER.finditer(clipped))
    if not matches:
        return None, "no '#### <number>' answer in the last 300 characters"
    last = matches[-1]
    if _CONTINUED.match(clipped, last.end()):
        tail = clipped[last.start() : last.end() + 20].split("\n")[0]
        return None, f"malformed '####' answer (a number must stand alone): {tail!r}"
    answer = last.group(1).replace(",", "").replace("$", "").rstrip(".")
    if not answer or answer in ("-", "."):
        return None, "empty '####' answer"
    return answer, "####"


_OPTIONS = {"timeout_s", "mask_response_faults"}


class GSM8KGrader:
    """Correct when the last ``#### N`` of the response (after ``</think>``) equals the ground truth number.

    Options: ``timeout_s`` and ``mask_response_faults``, passed to the math comparison.
    """

    name = "gsm8k"
    version = "1.0.0"
    # its own golden cases: the math grader's selftest.jsonl sits beside it
    selftest_file = "gsm8k_selftest.jsonl"

    def __init__(self) -> None:
        self._math = MathGrader(max_workers=1)

    def warm(self) -> None:
        """Nothing to start: GSM8K answers are plain numbers, judged without SymPy helpers."""

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError for bad options (``rrl grade`` asks once, before grading any row)."""
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown}; the gsm8k grader takes timeout_s and mask_response_faults"
            )
        self._math.check_options(dict(options))

    def check_gold(self, ground_truth: Any) -> str | None:
        """Why no answer can be judged against ``ground_truth`` (the math grader's rule, which compares here)."""
        return self._math.check_gold(ground_truth)

    def release(self) -> None:
        """Stop the math comparison's idle helpers (see ``MathGrader.release``)."""
        self._math.release()

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        refused = Grade.refused_call(self.check_options, options, response)
        if refused is not None:
            return refused
        try:
            text = after_think(response)
        except UnclosedThinkError:
            return Grade.incorrect("unclosed <think>: no final answer", rule="####", no_answer=True)
        answer, why = final_answer(text)
        if answer is None:
            return Grade.incorrect(why, rule="####", no_answer=True)  # the cue for a fallback grader
        verdict = self._math.grade(f"\\boxed{{{answer}}}", ground_truth, mode="strict", **options)
        details = {**verdict.details, "rule": "####", "extracted": [answer]}
        return Grade(verdict.score, verdict.verdict, verdict.reason, details)
