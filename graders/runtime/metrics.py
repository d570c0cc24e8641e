"""Per-grader counters with bounded memory (a reservoir for percentiles, fixed log bins for histograms)."""

from __future__ import annotations

import bisect
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from graders.types import Grade

RESERVOIR = 4096
# Latency histogram bins: 10 us .. ~1000 s, 4 per decade; mergeable and plot-ready.
HIST_EDGES_MS: list[float] = [10 ** (k / 4) for k in range(-8, 25)]


_KIND = re.compile(r"[a-z][a-z0-9_]{0,39}")


def error_kind(reason: str) -> str:
    """The stable prefix of an error reason ("timeout", "grader_exception", ...), for low-cardinality counts
    and metric keys: a prefix that is no identifier (a plugin's free-text reason) counts as ``other``."""
    head = reason.split(":", 1)[0].strip()
    if not head:
        return "unspecified"
    return head if _KIND.fullmatch(head) else "other"


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

    def record(self, grades: list[Grade], latencies_ms: list[float]) -> None:
        """Count a chunk of grades and observe the latencies of those that ran (cache hits have none)."""
        self.count += len(grades)
        self.verdicts.update(g.verdict for g in grades)
        self.error_reasons.update(error_kind(g.reason) for g in grades if g.verdict == "error")
        hist, edges = self._hist, HIST_EDGES_MS
        for ms in latencies_ms:
            hist[bisect.bisect_right(edges, ms)] += 1  # bin i: edges[i-1] <= ms < edges[i]
        room = RESERVOIR - len(self._sample)
        if room > 0:  # reservoir not full yet: keep everything
            self._sample += latencies_ms[:room]
            self._seen += min(room, len(latencies_ms))
        # Algorithm R: once full, the n-th value replaces a random slot with probability RESERVOIR / n.
        sample, rand, seen = self._sample, self._rng.random, self._seen
        for ms in latencies_ms[max(room, 0) :]:
            seen += 1
            j = int(rand() * seen)
            if j < RESERVOIR:
                sample[j] = ms
        self._seen = seen

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
