"""Aggregate an output file into the numbers ``rrl grade`` prints and reports (bounded memory)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graders.evaluation.scoring import pass_at_k
from graders.runtime.metrics import error_kind


@dataclass
class Group:
    """Totals for all rows or one data_source."""

    rows: int = 0
    malformed: int = 0
    responses: int = 0
    score_sum: float = 0.0
    judged: int = 0
    judged_score_sum: float = 0.0
    maj_rows: Counter[int] = field(default_factory=Counter)  # k -> rows with exactly k samples
    maj_correct: Counter[int] = field(default_factory=Counter)  # k -> of those, majority answer correct
    pass_sums: dict[int, float] = field(default_factory=lambda: defaultdict(float))  # k -> sum of pass@k
    pass_rows: Counter[int] = field(default_factory=Counter)  # k -> rows with >= k samples
    verdicts: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    ks: Counter[int] = field(default_factory=Counter)

    def add(self, line: dict[str, Any]) -> None:
        self.rows += 1
        if str(line.get("reason", "")).startswith("malformed_row"):
            self.malformed += 1
            self.errors["malformed_row"] += 1
            return
        grades = line.get("grades") or []
        n = len(grades)
        c = sum(g["verdict"] == "correct" for g in grades)
        self.ks[n] += 1
        for g in grades:
            self.responses += 1
            self.score_sum += float(g["score"])
            self.verdicts[g["verdict"]] += 1
            if g["verdict"] == "error":
                self.errors[error_kind(g.get("reason", ""))] += 1
            else:
                self.judged += 1
                self.judged_score_sum += float(g["score"])
        for k in _ks(n):
            self.pass_sums[k] += pass_at_k(n, c, k)
            self.pass_rows[k] += 1
        if n:
            # maj@k over the same rows as pass@k at the largest k: a row whose responses all failed to be judged
            # has no correct majority (as it has no pass), so it counts as not correct instead of being dropped.
            self.maj_rows[n] += 1
            self.maj_correct[n] += int(bool(line.get("maj")))

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rows": self.rows,
            "malformed_rows": self.malformed,
            "responses": self.responses,
            "mean_score": self.score_sum / self.responses if self.responses else None,
            "mean_score_judged": self.judged_score_sum / self.judged if self.judged else None,
            "verdicts": dict(self.verdicts),
            "errors": dict(self.errors),
        }
        for k in sorted(self.pass_rows):
            out[f"pass@{k}"] = self.pass_sums[k] / self.pass_rows[k]
        k = self.max_k
        if self.maj_rows[k]:
            out[f"maj@{k}"] = self.maj_correct[k] / self.maj_rows[k]
        return out

    @property
    def max_k(self) -> int:
        return max(self.ks) if self.ks else 0


def _ks(n: int) -> list[int]:
    """pass@k reported at 1, 2, 4, ... and n itself."""
    ks = {n} if n else set()
    k = 1
    while k <= n:
        ks.add(k)
        k *= 2
    return sorted(ks)


def summarize(output: Path) -> dict[str, Any]:
    """Overall and per-data_source metrics of every line in ``output`` (this run and resumed ones)."""
    overall = Group()
    by_source: dict[str, Group] = {}
    with output.open(encoding="utf-8") as fh:
        for text in fh:
            if not text.strip():
                continue
            line = json.loads(text)
            overall.add(line)
            source = line.get("data_source")
            by_source.setdefault(str(source) if source is not None else "(none)", Group()).add(line)
    return {"overall": overall.metrics(), "by_source": {s: g.metrics() for s, g in sorted(by_source.items())}}
