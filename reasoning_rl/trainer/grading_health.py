"""A step's grading health: a step whose every sample is a grader ``error`` has nothing to train on (its loss
is masked everywhere), so the run stops naming the cause instead of exiting 0 having learnt nothing; a high
error share short of that is a warning on the console. And each grader's latency and totals in the trace."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.records import Sample
from reasoning_rl.trainer.resume import TrainError
from reasoning_rl.trainer.rewards import error_kind, grader_key, verdict_grader


def _top_cause(errors: Sequence[Sample]) -> str:
    judged = [(grader_key(verdict_grader(s)), error_kind(s.grade.reason), s) for s in errors]
    causes = {(grader, kind): s.grade.reason for grader, kind, s in reversed(judged)}
    (grader, kind), n = Counter((grader, kind) for grader, kind, _ in judged).most_common(1)[0]
    return f"{n} x {kind} from grader {grader!r} (first: {causes[grader, kind][:160]!r})"


def check_grading(
    samples: Sequence[Sample], *, step: int, warn_share: float, samples_file: Path | None
) -> str | None:
    """Raise ``TrainError`` when no sample of the step was judged; return a warning line when the error share
    is over ``warn_share`` (``grading.warn_error_share``), else None."""
    errors = [s for s in samples if s.masked]
    if not samples or not errors:
        return None
    share = len(errors) / len(samples)
    if len(errors) == len(samples):
        raise TrainError(
            f"step {step}: every one of {len(samples)} samples is a grader error, nothing to train on: "
            f"{_top_cause(errors)}" + (f"; see {samples_file}" if samples_file is not None else "")
        )
    if share > warn_share:
        return (
            f"step {step}: {len(errors)} of {len(samples)} samples ({share:.0%}) are grader errors (masked, "
            f"over grading.warn_error_share={warn_share:g}): {_top_cause(errors)}"
        )
    return None


def trace_grade_latency(pool_metrics: dict[str, Any], trace: TraceWriter, step: int) -> None:
    """Per grader, as the runtime reports it (``GradingPool.metrics()``): latency p50/p95/p99/max and the running
    totals (grades, cache hits, timeouts), so `rrl report` shows each grader's latency and throughput."""
    for name, stats in pool_metrics.get("graders", {}).items():
        latency = stats.get("latency_ms")
        for stat, value in (latency if isinstance(latency, dict) else {}).items():
            if isinstance(value, int | float) and math.isfinite(value):
                trace.counter("grade_latency_ms", step, value, grader=name, stat=stat)
        for counter, key in (
            ("grade_count", "count"),
            ("grade_cache_hits", "cache_hits"),
            ("grade_timeouts", "timeouts"),
        ):
            if isinstance(stats.get(key), int):
                trace.counter(counter, step, stats[key], grader=name)
