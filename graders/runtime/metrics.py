"""Per-grader counters with bounded memory (a reservoir for percentiles, fixed log bins for histograms)."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

RESERVOIR = 4096
# Latency histogram bins: 10 us .. ~1000 s, 4 per decade; mergeable and plot-ready.
HIST_EDGES_MS: list[float] = [10 ** (k / 4) for k in range(-8, 25)]


def error_kind(reason: str) -> str:
    """The stable prefix of an error reason ("timeout", "grader_exception", ...), for low-cardinality counts."""
    return reason.split(":", 1)[0].strip() or "unspecified"


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    idx = min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[idx]


@dataclass
class GraderStats:
    count: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    error_reasons: Counter[str] = field(default_factory=Counter)
    timeouts: int = 0
    retries: int = 0
    cache_hits: int = 0
    _seen: int = 0
    _sample: list[float] = field(default_factory=list)
    _hist: list[int] = field(default_factory=lambda: [0] * (len(HIST_EDGES_MS) + 1))
    _rng: random.Random = field(default_factory=lambda: random.Random(0))

    def observe_latency(self, ms: float) -> None:
        self._seen += 1
        if len(self._sample) < RESERVOIR:
            self._sample.append(ms)
        else:
            j = int(self._rng.random() * self._seen)
            if j < RESERVOIR:
                self._sample[j] = ms
        lo, hi = 0, len(HIST_EDGES_MS)
        while lo < hi:  # first edge > ms
            mid = (lo + hi) // 2
            if HIST_EDGES_MS[mid] <= ms:
                lo = mid + 1
            else:
                hi = mid
        self._hist[lo] += 1

    def snapshot(self) -> dict[str, Any]:
        ordered = sorted(self._sample)
        return {
            "count": self.count,
            "verdicts": dict(self.verdicts),
            "error_reasons": dict(self.error_reasons),
            "latency_ms": {f"p{q}": percentile(ordered, q) for q in (50, 95, 99)}
            | {"max": ordered[-1] if ordered else math.nan},
            "latency_hist": {"edges_ms": HIST_EDGES_MS, "counts": list(self._hist)},
            "timeouts": self.timeouts,
            "retries": self.retries,
            "cache_hits": self.cache_hits,
            "cache_hit_rate": self.cache_hits / self.count if self.count else 0.0,
        }
