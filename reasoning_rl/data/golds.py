"""Rows whose ground truth no answer can be judged against (``data.bad_gold``), found when the data loads.

Such a row can only be graded ``error`` (masked) or, when a sample has no extractable answer, ``incorrect``: it
teaches nothing or the wrong thing, and a run of nothing else used to exit 0 having learned nothing. Each
row's grader is asked through the grading runtime (``graders.runtime.gold_problems``: graders with a
``check_gold``, math and gsm8k; the others accept every gold), once per distinct gold.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from graders.runtime import gold_problems
from reasoning_rl.data.schema import DataError, Example

SHOWN_IDS = 5  # row ids a message names


@dataclass(frozen=True)
class BadGolds:
    """The rows of one split whose gold their grader cannot judge: their ids and the first reason."""

    split: str
    ids: tuple[str, ...]
    reason: str

    def line(self) -> str:
        """One line: how many, the first ids, and why the first one cannot be judged."""
        more = f" (+{len(self.ids) - SHOWN_IDS} more)" if len(self.ids) > SHOWN_IDS else ""
        return (
            f"{len(self.ids)} {self.split} row(s) have a ground truth their grader cannot judge (ids "
            f"{', '.join(self.ids[:SHOWN_IDS])}{more}; first: {self.reason})"
        )


def screen_golds(
    examples: Sequence[Example], split: str, policy: str
) -> tuple[list[Example], BadGolds | None]:
    """(the rows to keep, what was found). ``policy`` is ``data.bad_gold``: ``refuse`` raises ``DataError`` on any
    bad gold; ``exclude`` drops those rows, and raises when none is left (nothing to train or evaluate)."""
    by_grader: dict[str, list[int]] = defaultdict(list)
    for i, ex in enumerate(examples):
        by_grader[ex.grader].append(i)
    bad: dict[int, str] = {}
    for spec, rows in by_grader.items():
        found = gold_problems(spec, [examples[i].ground_truth for i in rows])
        bad.update({rows[j]: f"{spec}: {why}" for j, why in found.items()})
    if not bad:
        return list(examples), None
    order = sorted(bad)
    report = BadGolds(split, tuple(examples[i].uid for i in order), bad[order[0]])
    if policy == "refuse":
        raise DataError(f"{report.line()}; fix those rows, or set data.bad_gold=exclude to leave them out")
    kept = [ex for i, ex in enumerate(examples) if i not in bad]
    if not kept:
        raise DataError(
            f"{report.line()}: every {split} row is excluded, nothing is left (data.bad_gold=exclude)"
        )
    return kept, report
