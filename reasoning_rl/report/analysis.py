"""Numbers the report shows, computed from the trace (and metrics.jsonl where the trace has no record).

Conventions: a step's stage time is the sum of its spans of that stage; ``other`` is the part of the step's
wall time (first span start to last span end) no stage covers, so stage shares always sum to 100 %.
GB/s uses 10^9 bytes.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reasoning_rl.report.hardware import model_params, peak_flops, train_flops
from reasoning_rl.report.load import RunData
from reasoning_rl.trace import STAGES

OTHER = "other"
PERCENTILES = (50, 90, 99)


@dataclass
class StepTiming:
    step: int
    stages: dict[str, float]
    wall: float

    @property
    def other(self) -> float:
        return max(0.0, self.wall - sum(self.stages.values()))


@dataclass
class HandoffStep:
    step: int
    bytes: float
    seconds: float

    @property
    def gbps(self) -> float | None:
        return self.bytes / 1e9 / self.seconds if self.seconds > 0 else None


@dataclass
class ThroughputStep:
    step: int
    gen_tokens: float | None
    gen_seconds: float | None
    train_tokens: float | None
    update_seconds: float | None
    mfu: float | None = None

    @property
    def gen_tps(self) -> float | None:
        return _rate(self.gen_tokens, self.gen_seconds)

    @property
    def update_tps(self) -> float | None:
        return _rate(self.train_tokens, self.update_seconds)


@dataclass
class GraderStats:
    grader: str
    latencies_ms: list[float]
    verdicts: Counter[str]
    cached: int
    timeouts: int

    @property
    def n(self) -> int:
        return len(self.latencies_ms)

    @property
    def errors(self) -> int:
        return self.verdicts.get("error", 0)

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else math.nan


@dataclass
class Analysis:
    meta: dict[str, Any]
    status: str
    timings: list[StepTiming]
    handoff: list[HandoffStep]
    throughput: list[ThroughputStep]
    mem_peak: dict[int, float]
    graders: list[GraderStats]
    verdicts_by_step: dict[int, Counter[str]]
    grade_wait: dict[int, float]
    metrics: list[dict[str, Any]]
    mfu_note: str
    params: int | None
    warnings: list[str] = field(default_factory=list)

    @property
    def stage_names(self) -> list[str]:
        seen = {s for t in self.timings for s in t.stages}
        ordered = [s for s in STAGES if s in seen] + sorted(seen - set(STAGES))
        return [*ordered, OTHER] if any(t.other > 0 for t in self.timings) else ordered

    def stage_seconds(self, timing: StepTiming, stage: str) -> float:
        return timing.other if stage == OTHER else timing.stages.get(stage, 0.0)

    def stage_totals(self) -> dict[str, float]:
        return {s: sum(self.stage_seconds(t, s) for t in self.timings) for s in self.stage_names}

    def stage_shares(self) -> dict[str, float]:
        """Percent of all step time per stage (sums to 100 when any time was recorded)."""
        totals = self.stage_totals()
        whole = sum(totals.values())
        return {s: 100.0 * v / whole for s, v in totals.items()} if whole > 0 else {}


def _rate(amount: float | None, seconds: float | None) -> float | None:
    return amount / seconds if amount is not None and seconds else None


def _timings_from_trace(spans: list[dict[str, Any]]) -> list[StepTiming]:
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        if isinstance(span.get("step"), int) and span.get("end") is not None and span.get("start") is not None:
            by_step[span["step"]].append(span)
    timings = []
    for step in sorted(by_step):
        stages: dict[str, float] = defaultdict(float)
        for span in by_step[step]:
            stages[str(span.get("stage"))] += max(0.0, float(span["end"]) - float(span["start"]))
        wall = max(float(s["end"]) for s in by_step[step]) - min(float(s["start"]) for s in by_step[step])
        timings.append(StepTiming(step, dict(stages), wall))
    return timings


def _timings_from_metrics(rows: list[dict[str, Any]]) -> list[StepTiming]:
    """``time/<stage>`` keys of metrics.jsonl, for runs whose trace is missing."""
    timings = []
    for row in rows:
        stages = {k.split("/", 1)[1]: float(v) for k, v in row.items()
                  if k.startswith("time/") and isinstance(v, int | float)}
        if stages and isinstance(row.get("step"), int):
            timings.append(StepTiming(row["step"], stages, sum(stages.values())))
    return timings


def _counter_sums(counters: list[dict[str, Any]], name: str) -> dict[int, float]:
    sums: dict[int, float] = defaultdict(float)
    for c in counters:
        if c.get("name") == name and isinstance(c.get("step"), int):
            sums[c["step"]] += float(c.get("value", 0.0))
    return dict(sums)


def _verdicts_from_metrics(rows: list[dict[str, Any]]) -> dict[int, Counter[str]]:
    """Keys like ``verdicts/math/correct`` or ``verdict_correct``: the last word is the verdict."""
    found: dict[int, Counter[str]] = {}
    for row in rows:
        counts: Counter[str] = Counter()
        for key, value in row.items():
            if "verdict" in key and isinstance(value, int | float):
                counts[re.split(r"[/._]", key)[-1]] += int(value)
        if counts and isinstance(row.get("step"), int):
            found[row["step"]] = counts
    return found


def _graders(counters: list[dict[str, Any]]) -> tuple[list[GraderStats], dict[int, Counter[str]]]:
    stats: dict[str, GraderStats] = {}
    by_step: dict[int, Counter[str]] = defaultdict(Counter)
    for c in counters:
        if c.get("name") != "grade_latency_ms":
            continue
        attrs = c.get("attrs") or {}
        name = str(attrs.get("grader", "?"))
        g = stats.setdefault(name, GraderStats(name, [], Counter(), 0, 0))
        verdict = str(attrs.get("verdict", "unknown"))
        g.latencies_ms.append(float(c.get("value", 0.0)))
        g.verdicts[verdict] += 1
        g.cached += bool(attrs.get("cached"))
        g.timeouts += bool(attrs.get("timeout")) or "timeout" in str(attrs.get("reason", "")).lower()
        if isinstance(c.get("step"), int):
            by_step[c["step"]][verdict] += 1
    return sorted(stats.values(), key=lambda g: g.grader), dict(by_step)


def analyze(run: RunData, *, peak_tflops: float | None = None) -> Analysis:
    trace, notes = run.trace, list(run.warnings)
    timings = _timings_from_trace(trace.spans) or _timings_from_metrics(run.metrics)
    handoff_bytes = _counter_sums(trace.counters, "handoff_bytes")
    gen_tokens = _counter_sums(trace.counters, "tokens_generated")
    train_tokens = _counter_sums(trace.counters, "tokens_trained")
    mem: dict[int, float] = {}
    for c in trace.counters:
        if c.get("name") == "gpu_mem_peak_bytes" and isinstance(c.get("step"), int):
            mem[c["step"]] = max(mem.get(c["step"], 0.0), float(c.get("value", 0.0)))
    stage_of = {t.step: t.stages for t in timings}
    handoff = [HandoffStep(s, b, stage_of.get(s, {}).get("handoff", 0.0)) for s, b in sorted(handoff_bytes.items())]
    if any(h.seconds == 0 for h in handoff):
        notes.append("some steps report hand-off bytes without a handoff span: GB/s not computed for them")

    params = model_params(trace.meta)
    peak, mfu_note = peak_flops(trace.meta, peak_tflops)
    world = int(trace.meta.get("world_size") or 1)
    if params is None and peak is not None:
        mfu_note = "MFU n/a: the trace meta has no model params/shape"
    throughput = []
    for step in sorted(set(gen_tokens) | set(train_tokens) | set(stage_of)):
        stages = stage_of.get(step, {})
        t = ThroughputStep(step, gen_tokens.get(step), stages.get("generate"), train_tokens.get(step),
                           stages.get("update"))
        if params is not None and peak is not None and t.train_tokens and t.update_seconds:
            t.mfu = train_flops(params, t.train_tokens) / t.update_seconds / (peak * world)
        throughput.append(t)
    if params is not None and peak is not None:
        mfu_note = f"MFU = 6·{params:,}·tokens / update s / ({peak / 1e12:g} TFLOP/s × {world}); {mfu_note}"

    graders, verdicts = _graders(trace.counters)
    if not verdicts:
        verdicts = _verdicts_from_metrics(run.metrics)
    grade_wait = {t.step: t.stages["grade_wait"] for t in timings if "grade_wait" in t.stages}
    if trace.end is not None:
        status = str(trace.end.get("status", "ok"))
    else:
        status = "running or crashed (no end record)" if trace.meta else "unknown (no trace)"
    return Analysis(trace.meta, status, timings, handoff, throughput, mem, graders, verdicts, grade_wait,
                    run.metrics, mfu_note, params, notes)
