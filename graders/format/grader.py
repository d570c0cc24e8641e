"""The ``format`` grader: a shaping reward for answering in the requested format, whatever the answer.

Meant as a small-weight component of a composed reward (``grading.rewards``: correctness + format), as TRL's
format rewards and verl's reward managers are used: it never looks at the ground truth. Styles: ``boxed``
(the final answer in a closed ``\\boxed{}`` that is not empty once spacing such as ``\\quad`` is dropped: the
math grader's strict rule) and ``gsm8k`` (a well-formed ``#### <number>`` in the last 300 characters: the gsm8k
grader's own rule, ``graders.math.gsm8k.final_answer``).
Text inside ``<think>...</think>`` does not count; an unclosed ``<think>`` has no final answer.
"""

from __future__ import annotations

from typing import Any

from graders.math.extract import UnclosedThinkError, after_think, find_boxes
from graders.math.gsm8k import final_answer
from graders.math.normalize import clean
from graders.types import Grade

STYLES = ("boxed", "gsm8k")


class FormatGrader:
    """Correct (score 1) when the response ends with an answer in ``style`` (option, default ``boxed``)."""

    name = "format"
    version = "1.0.0"

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError for bad options (``rrl grade`` asks once, before grading any row)."""
        unknown = sorted(set(options) - {"style"})
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown}; the format grader takes style ({'|'.join(STYLES)})"
            )
        style = options.get("style", "boxed")
        if style not in STYLES:
            raise ValueError(f"format grader: style must be one of {', '.join(STYLES)}, got {style!r}")

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        refused = Grade.refused_call(self.check_options, options, response)
        if refused is not None:
            return refused
        style = options.get("style", "boxed")
        try:
            text = after_think(response)
        except UnclosedThinkError:
            return Grade.incorrect("unclosed <think>: no final answer", style=style)
        if style == "gsm8k":
            answer, why = final_answer(text)
            if answer is not None:
                return Grade.correct("'#### <number>' answer", style=style)
            return Grade.incorrect(why, style=style)
        boxes = find_boxes(text)
        # empty as the math grader sees it: spacing (\quad, \,, ~), dollars and trailing dots are not an answer
        if boxes and clean(boxes[-1].content).text:
            return Grade.correct("\\boxed{} answer", style=style)
        return Grade.incorrect("no closed, non-empty \\boxed{} answer", style=style)

    def golden_cases(self) -> list[dict[str, Any]]:
        """Checked by ``rrl graders selftest`` and before a run that uses this grader."""
        return [
            {"response": "so \\boxed{42}", "ground_truth": None, "verdict": "correct"},
            {"response": "so \\boxed{}", "ground_truth": None, "verdict": "incorrect", "note": "empty box"},
            {
                "response": "so \\boxed{\\quad}",
                "ground_truth": None,
                "verdict": "incorrect",
                "note": "only spacing",
            },
            {
                "response": "so \\boxed{4",
                "ground_truth": None,
                "verdict": "incorrect",
                "note": "never closed",
            },
            {"response": "<think>\\boxed{1}</think> 1", "ground_truth": None, "verdict": "incorrect"},
            {"response": "#### 7", "ground_truth": None, "verdict": "correct", "options": {"style": "gsm8k"}},
            {
                "response": "\\boxed{7}",
                "ground_truth": None,
                "verdict": "incorrect",
                "options": {"style": "gsm8k"},
            },
            {"response": "x", "ground_truth": None, "verdict": "error", "options": {"style": "xml"}},
        ]
