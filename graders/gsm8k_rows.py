"""Recognise a ground truth in GSM8K's own schema: the worked solution whose last line is ``#### N``.

GSM8K ships ``answer`` as the whole solution (calculator notes ``<<3*3=9>>`` and all) ending in ``#### 18``.
Taken as the gold, that text makes every right answer ``incorrect``; the gold meant is the number after
``####``. Every loader (``rrl train``/``eval`` rows, ``rrl grade`` rows, the math grader's own gold reading)
asks this one function, so they agree on which rows are GSM8K-shaped and what their gold is.
"""

from __future__ import annotations

import re

GSM8K_RECIPE = "datasets/recipes/gsm8k.py"
# "####" at the start of a line: GSM8K's marker for the final answer (never a Markdown heading mid-solution).
_MARKER = re.compile(r"(?:^|\n)[ \t]*####")
# The last line: "#### 1,234" / "#### -5" / "#### 2.5" and nothing after it.
_FINAL = re.compile(r"(?:^|\n)[ \t]*####[ \t]*\$?(-?[0-9][0-9,]*(?:\.[0-9]+)?)[ \t]*\Z")


class NotAGold(ValueError):
    """A GSM8K-shaped ground truth whose final ``####`` line holds no number (the row cannot be graded)."""


def gsm8k_gold(ground_truth: object) -> str | None:
    """The number after the final ``####`` when ``ground_truth`` is a GSM8K worked solution, else None.

    Raises ``NotAGold`` for text that has GSM8K's ``####`` line but no plain number on it (``#### 1/2``,
    ``#### 5 apples``, text after it): guessing would grade against the wrong gold.
    """
    if not isinstance(ground_truth, str) or not _MARKER.search(ground_truth):
        return None
    final = _FINAL.search(ground_truth.rstrip())
    if final is None:
        raise NotAGold(
            "ground truth has GSM8K's '####' line but no plain number at its end; "
            f"convert the file with {GSM8K_RECIPE}"
        )
    return final.group(1).replace(",", "")


def gsm8k_note(where: str) -> str:
    """The one line a loader prints when it took the number after ``####`` (``where``: which rows)."""
    return (
        f"{where} in GSM8K's own schema (the answer is a worked solution ending in '#### N'): "
        f"grading against the number after '####' ({GSM8K_RECIPE} converts the file once)"
    )
