"""Numbers the report shows, computed from the trace (and metrics.jsonl where the trace has no record).

Conventions: a step's stage time is the sum of its spans of that stage; ``other`` is the part of the step's
wall time (first span start to last span end) no stage covers, so stage shares always sum to 100 %.
GB/s uses 10^9 bytes.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reasoning_rl.report.hardware import model_params, peak_flops, train_flops
from reasoning_rl.report.load import RunData
from reasoning_rl.report.staleness import StalenessReport, staleness_report
from reasoning_rl.report.tools import ToolReport, tool_report
from reasoning_rl.trace import STAGES

OTHER = "other"
VERDICTS = ("correct", "incorrect", "error")  # the verdict values of the trace schema (docs/trace-schema.md)
# Per-grader totals the grading runtime reports, for traces without per-sample latency records.
RUNTIME_TOTALS = {"grade_count": "reported_count", "grade_cache_hits": "cached", "grade_timeouts": "timeouts"}
PERCENTILES = (50, 95, 99)  # what the grading runtime reports


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
    computed_tokens: float | None = (
        None  # run forward/backward (zero-advantage rows skipped); None: old trace
    )

    @property
    def gen_tps(self) -> float | None:
        return _rate(self.gen_tokens, self.gen_seconds)

    @property
    def update_tps(self) -> float | None:
        return _rate(self.train_tokens, self.update_seconds)


@dataclass
class GraderStats:
    """Per-sample latencies when the trace has them; else the latest aggregates the grading runtime reported
    (``grade_latency_ms`` records with ``attrs.stat``); verdicts from the trace or metrics.jsonl."""

    grader: str
    latencies_ms: list[float] = field(default_factory=list)
    reported_ms: dict[str, float] = field(default_factory=dict)
    verdicts: Counter[str] = field(default_factory=Counter)
    cached: int | None = None
    timeouts: int | None = None

    reported_count: int | None = None

    @property
    def n(self) -> int:
        return len(self.latencies_ms) or self.reported_count or sum(self.verdicts.values())

    @property
    def errors(self) -> int:
        return self.verdicts.get("error", 0)

    def percentile(self, q: float) -> float:
        if self.latencies_ms:
            return float(np.percentile(self.latencies_ms, q))
        return self.reported_ms.get(f"p{q:g}", math.nan)

    @property
    def max_ms(self) -> float:
        return max(self.latencies_ms) if self.latencies_ms else self.reported_ms.get("max", math.nan)


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
    tools: ToolReport | None = None  # multi-turn tool rollouts (report.tools)
    staleness: StalenessReport | None = None  # continuous rollouts (report.staleness)
    comm: dict[int, dict[str, float]] = field(
        default_factory=dict
    )  # step -> kind -> bytes (all ranks' records)

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
        if (
            isinstance(span.get("step"), int)
            and span.get("end") is not None
            and span.get("start") is not None
        ):
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
    """``time/<stage>_s`` keys of metrics.jsonl (``time/step_s`` is the wall), for runs whose trace is missing."""
    timings = []
    for row in rows:
        stages = {
            k[5:].removesuffix("_s"): float(v)
            for k, v in row.items()
            if k.startswith("time/") and k != "time/step_s" and isinstance(v, int | float)
        }
        wall = row.get("time/step_s")
        if stages and isinstance(row.get("step"), int):
            total = sum(stages.values())
            timings.append(
                StepTiming(row["step"], stages, float(wall) if isinstance(wall, int | float) else total)
            )
    return timings


def _counter_sums(counters: list[dict[str, Any]], name: str) -> dict[int, float]:
    sums: dict[int, float] = defaultdict(float)
    for c in counters:
        if c.get("name") == name and isinstance(c.get("step"), int):
            sums[c["step"]] += float(c.get("value", 0.0))
    return dict(sums)


def comm_by_kind(counters: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """``comm_bytes`` counters (kind = all_gather / reduce_scatter / handoff / ...) and the driver <-> worker data
    of several ranks (``dispatch_bytes``: kinds ``dispatch_to_workers`` / ``dispatch_from_workers``) summed per
    step and kind."""
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for c in counters:
        if not isinstance(c.get("step"), int):
            continue
        attrs = c.get("attrs") or {}
        if c.get("name") == "comm_bytes":
            out[c["step"]][str(attrs.get("kind", "?"))] += float(c.get("value", 0.0))
        elif c.get("name") == "dispatch_bytes":
            out[c["step"]][f"dispatch_{attrs.get('direction', '?')}"] += float(c.get("value", 0.0))
    return {step: dict(kinds) for step, kinds in sorted(out.items())}


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def _verdicts_from_metrics(
    rows: list[dict[str, Any]],
) -> tuple[dict[int, Counter[str]], dict[str, Counter[str]]]:
    """Per-step verdict totals (``grading/<verdict>``) and per-grader run totals (``grading/<grader>/<verdict>``)."""
    by_step: dict[int, Counter[str]] = {}
    by_grader: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        counts: Counter[str] = Counter()
        for key, value in row.items():
            parts = key.split("/")
            if parts[0] != "grading" or parts[-1] not in VERDICTS or not _numeric(value):
                continue
            if len(parts) == 2:
                counts[parts[1]] += int(value)
            elif len(parts) == 3:
                by_grader[parts[1]][parts[2]] += int(value)
        if counts and isinstance(row.get("step"), int):
            by_step[row["step"]] = counts
    return by_step, dict(by_grader)


def error_reasons(rows: list[dict[str, Any]]) -> Counter[str]:
    """Why samples were masked (``grading/error_reason/<reason>`` in metrics.jsonl), summed over the run."""
    reasons: Counter[str] = Counter()
    for row in rows:
        for key, value in row.items():
            if key.startswith("grading/error_reason/") and _numeric(value):
                reasons[key.rsplit("/", 1)[1]] += int(value)
    return reasons


def _graders(
    counters: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> tuple[list[GraderStats], dict[int, Counter[str]]]:
    stats: dict[str, GraderStats] = {}
    totals: dict[str, dict[str, int]] = defaultdict(dict)
    by_step: dict[int, Counter[str]] = defaultdict(Counter)
    for c in counters:
        if c.get("name") not in ("grade_latency_ms", *RUNTIME_TOTALS):
            continue
        attrs = c.get("attrs") or {}
        g = stats.setdefault(str(attrs.get("grader", "?")), GraderStats(str(attrs.get("grader", "?"))))
        if c["name"] in RUNTIME_TOTALS:
            totals[g.grader][RUNTIME_TOTALS[c["name"]]] = int(
                c["value"]
            )  # totals so far: the latest one wins
            continue
        if attrs.get("stat"):
            g.reported_ms[str(attrs["stat"])] = float(c.get("value", math.nan))
            continue
        verdict = str(attrs.get("verdict", "unknown"))
        g.latencies_ms.append(float(c.get("value", 0.0)))
        g.verdicts[verdict] += 1
        g.cached = (g.cached or 0) + bool(attrs.get("cached"))
        g.timeouts = (g.timeouts or 0) + bool(attrs.get("timeout"))
        if isinstance(c.get("step"), int):
            by_step[c["step"]][verdict] += 1
    for name, fields in totals.items():
        if not stats[name].latencies_ms:  # per-sample records, when present, are the finer source
            for attr, value in fields.items():
                setattr(stats[name], attr, value)
    metric_steps, metric_graders = _verdicts_from_metrics(rows)
    for name, verdicts in metric_graders.items():
        g = stats.setdefault(name, GraderStats(name))
        if not g.latencies_ms:
            g.verdicts = verdicts
    return sorted(stats.values(), key=lambda g: g.grader), dict(by_step) or metric_steps


def analyze(run: RunData, *, peak_tflops: float | None = None) -> Analysis:
    trace, notes = run.trace, list(run.warnings)
    timings = _timings_from_trace(trace.spans) or _timings_from_metrics(run.metrics)
    handoff_bytes = _counter_sums(trace.counters, "handoff_bytes")
    gen_tokens = _counter_sums(trace.counters, "tokens_generated")
    train_tokens = _counter_sums(trace.counters, "tokens_trained")
    computed_tokens = _counter_sums(trace.counters, "tokens_computed")
    mem: dict[int, float] = {}
    for c in trace.counters:
        if c.get("name") == "gpu_mem_peak_bytes" and isinstance(c.get("step"), int):
            mem[c["step"]] = max(mem.get(c["step"], 0.0), float(c.get("value", 0.0)))
    stage_of = {t.step: t.stages for t in timings}
    handoff = [
        HandoffStep(s, b, stage_of.get(s, {}).get("handoff", 0.0)) for s, b in sorted(handoff_bytes.items())
    ]
    if not handoff:  # no trace counters: the trainer's handoff/bytes + handoff/seconds metrics
        handoff = [
            HandoffStep(r["step"], float(r["handoff/bytes"]), float(r["handoff/seconds"]))
            for r in run.metrics
            if isinstance(r.get("step"), int)
            and _numeric(r.get("handoff/bytes"))
            and _numeric(r.get("handoff/seconds"))
        ]
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
        t = ThroughputStep(
            step, gen_tokens.get(step), stages.get("generate"), train_tokens.get(step), stages.get("update")
        )
        if (
            t.gen_tokens is None
            and t.train_tokens is None
            and t.gen_seconds is None
            and t.update_seconds is None
        ):
            continue  # e.g. a step-0 evaluation: nothing generated for training, nothing trained
        t.computed_tokens = computed_tokens.get(step)
        # FLOPs of the rows the update computed: a skipped zero-advantage row costs none (MFU stays <= 1)
        flop_tokens = t.train_tokens if t.computed_tokens is None else t.computed_tokens
        if params is not None and peak is not None and flop_tokens and t.update_seconds:
            t.mfu = train_flops(params, flop_tokens) / t.update_seconds / (peak * world)
        throughput.append(t)
    if params is not None and peak is not None:
        mfu_note = (
            f"MFU = 6·{params:,}·computed tokens / update s / ({peak / 1e12:g} TFLOP/s × {world}); {mfu_note}"
        )

    graders, verdicts = _graders(trace.counters, run.metrics)
    grade_wait = {t.step: t.stages["grade_wait"] for t in timings if "grade_wait" in t.stages}
    if trace.end is not None:
        status = str(trace.end.get("status", "ok"))
    else:
        status = "running or crashed (no end record)" if trace.meta else "unknown (no trace)"
    return Analysis(
        trace.meta,
        status,
        timings,
        handoff,
        throughput,
        mem,
        graders,
        verdicts,
        grade_wait,
        run.metrics,
        mfu_note,
        params,
        notes,
        tool_report(trace.counters),
        staleness_report(trace.counters, run.metrics),
        comm_by_kind(trace.counters),
    )
