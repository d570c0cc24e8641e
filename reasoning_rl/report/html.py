"""Assemble the self-contained HTML page: inline CSS, figures as base64 PNGs, tables, warnings first."""

from __future__ import annotations

import base64
import datetime as dt
import math
from collections import Counter
from html import escape
from statistics import median
from typing import Any

import yaml

from reasoning_rl.report.analysis import PERCENTILES, Analysis, error_reasons
from reasoning_rl.report.freshness import freshness_html
from reasoning_rl.report.staleness import StalenessReport

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1240px;color:#222}
h1{margin-bottom:4px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
.sub{color:#666} .warn{background:#fff4d6;border:1px solid #e8c15a;padding:8px 12px;border-radius:6px}
table{border-collapse:collapse;margin:8px 0;font-size:14px} td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left} img{max-width:100%;display:block;margin:8px 0}
.kv td{text-align:left} .muted{color:#888} pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px}
"""


def fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return escape(str(value))


def human_bytes(n: float) -> str:
    """Decimal units, matching GB/s (10^9 bytes)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{fmt(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def image(png: bytes | None, alt: str) -> str:
    if png is None:
        return f'<p class="muted">No data for “{escape(alt)}” in this run.</p>'
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _details(summary: str, inner: str) -> str:
    return f"<details><summary>{escape(summary)}</summary>{inner}</details>"


def _header(a: Analysis, run_name: str) -> str:
    meta = a.meta
    started = meta.get("started")
    when = (
        dt.datetime.fromtimestamp(float(started), dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if started else None
    )
    model = meta.get("model") or {}
    rows: list[tuple[str, Any]] = [
        ("status", a.status),
        ("started", when),
        ("device", meta.get("device_name") or meta.get("device")),
        ("world size", meta.get("world_size")),
        ("model params", f"{a.params:,}" if a.params else None),
        ("trainable params", _trainable(model)),
        ("model dtype", model.get("dtype")),
        ("steps with timings", len(a.timings)),
        ("metrics rows", len(a.metrics)),
    ]
    if a.timings:
        rows.append(("mean step time", f"{sum(t.wall for t in a.timings) / len(a.timings):.3g} s"))
    rewards = [r.get("reward_mean", r.get("reward/mean")) for r in a.metrics]
    rewards = [x for x in rewards if isinstance(x, int | float) and x == x]  # drop missing and NaN
    if rewards:
        rows.append(("reward (first → last)", f"{rewards[0]:.3g} → {rewards[-1]:.3g}"))
    norms = [
        r["policy/adapter_norm"] for r in a.metrics if isinstance(r.get("policy/adapter_norm"), int | float)
    ]
    if norms:  # a LoRA run: how far the adapters moved the base weights, ||scale·B·A|| over all layers
        rows.append(("adapter update norm (first → last)", f"{norms[0]:.3g} → {norms[-1]:.3g}"))
    kv = "".join(f"<tr><th>{escape(k)}</th><td>{fmt(v)}</td></tr>" for k, v in rows if v is not None)
    warnings = "".join(f"<li>{escape(w)}</li>" for w in a.warnings)
    warn_html = f'<div class="warn"><b>Warnings</b><ul>{warnings}</ul></div>' if warnings else ""
    return f'<h1>Run report: {escape(run_name)}</h1><p class="sub">reasoning-rl</p>{warn_html}<table class="kv">{kv}</table>'


def _trainable(model: dict[str, Any]) -> str | None:
    """Trained parameter count, with the LoRA rank and the share of the base model for an adapter run."""
    trainable = model.get("trainable")
    if not trainable:
        return None
    if not model.get("lora_rank") or not model.get("params"):
        return f"{int(trainable):,}"
    share = 100 * int(trainable) / int(model["params"])
    return f"{int(trainable):,} (LoRA r={model['lora_rank']}: {share:.2g} % of the base)"


def _time_section(a: Analysis, figs: dict[str, bytes | None]) -> str:
    totals, shares = a.stage_totals(), a.stage_shares()
    n = max(1, len(a.timings))
    rows = [[s, totals[s], shares.get(s), totals[s] / n] for s in a.stage_names]
    return (
        "<h2>Where the time goes</h2>"
        + image(figs["timeline"], "stage timeline")
        + image(figs["stage_share"], "stage share")
        + table(["stage", "total s", "share %", "mean s/step"], rows)
    )


def _handoff_section(a: Analysis, figs: dict[str, bytes | None]) -> str:
    if not a.handoff:
        return "<h2>Weight hand-off</h2><p class='muted'>No hand-off counters in the trace.</p>"
    rates = [h.gbps for h in a.handoff if h.gbps is not None]
    summary = (
        f"<p>{human_bytes(sum(h.bytes for h in a.handoff))} moved in {sum(h.seconds for h in a.handoff):.3g} s"
        f" over {len(a.handoff)} steps; median {fmt(median(rates) if rates else None)} GB/s.</p>"
    )
    rows = [[h.step, h.bytes, h.seconds, h.gbps] for h in a.handoff]
    return (
        "<h2>Weight hand-off</h2>"
        + summary
        + image(figs["handoff"], "hand-off")
        + _details("per step", table(["step", "bytes", "seconds", "GB/s"], rows))
        + freshness_html(a.metrics, table, _details)
    )


def _comm_section(a: Analysis) -> str:
    if not a.comm:
        return ""
    kinds = sorted({k for step in a.comm.values() for k in step})
    rows = [[step, *(by.get(k) for k in kinds)] for step, by in a.comm.items()]
    totals = ", ".join(f"{k} {human_bytes(sum(by.get(k, 0.0) for by in a.comm.values()))}" for k in kinds)
    return (
        "<h2>Communication</h2>"
        + f"<p>Bytes by kind over {len(a.comm)} steps: {escape(totals)} (collective buffers summed over "
        + "ranks; dispatch_*: the driver's pickled calls to and results from the model workers).</p>"
        + _details("per step", table(["step", *kinds], rows))
    )


def _throughput_section(a: Analysis, figs: dict[str, bytes | None]) -> str:
    rows = [
        [
            t.step,
            t.gen_tokens,
            t.gen_tps,
            t.train_tokens,
            t.update_tps,
            100 * t.mfu if t.mfu is not None else None,
        ]
        for t in a.throughput
    ]
    return (
        "<h2>Throughput</h2>"
        + image(figs["throughput"], "throughput")
        + f"<p class='muted'>{escape(a.mfu_note)}</p>"
        + _details(
            "per step",
            table(
                ["step", "tokens generated", "gen tokens/s", "tokens trained", "update tokens/s", "MFU %"],
                rows,
            ),
        )
    )


def _memory_section(a: Analysis, figs: dict[str, bytes | None]) -> str:
    if not a.mem_peak:
        return "<h2>GPU memory</h2><p class='muted'>No GPU memory counters (a CPU run, or not recorded).</p>"
    top = max(a.mem_peak.values())
    return f"<h2>GPU memory</h2><p>Highest peak: {top / 2**30:.2f} GiB.</p>" + image(figs["memory"], "memory")


def _grading_section(a: Analysis, figs: dict[str, bytes | None]) -> str:
    rows = []
    for g in a.graders:
        mix = ", ".join(f"{k} {v}" for k, v in sorted(g.verdicts.items()))
        cache = 100 * g.cached / g.n if g.cached is not None and g.n else None
        rows.append(
            [
                g.grader,
                g.n,
                *[g.percentile(q) for q in PERCENTILES],
                g.max_ms,
                cache,
                g.errors,
                g.timeouts,
                mix,
            ]
        )
    header = [
        "grader",
        "samples",
        *[f"p{q} ms" for q in PERCENTILES],
        "max ms",
        "cache hit %",
        "errors",
        "timeouts",
        "verdicts",
    ]
    stats = table(header, rows) if rows else "<p class='muted'>No grader latency counters in the trace.</p>"
    reasons = error_reasons(a.metrics)
    if reasons:
        stats += (
            "<p>Masked samples by reason: "
            + escape(", ".join(f"{k} {v}" for k, v in reasons.most_common()))
            + "</p>"
        )
    if any(g.reported_ms and not g.latencies_ms for g in a.graders):
        stats += "<p class='muted'>Latency percentiles as last reported by the grading runtime (not per sample).</p>"
    waits = list(a.grade_wait.values())
    wait = (
        (
            f"<p>Waiting for grading after generation ended: mean {fmt(sum(waits) / len(waits))} s, "
            f"max {fmt(max(waits))} s per step.</p>"
        )
        if waits
        else ""
    )
    return "<h2>Grading</h2>" + stats + wait + image(figs["grading"], "grading")


def _tools_section(a: Analysis) -> str:
    """Tool calls per sample, latency p50/p99 and errors per tool, turns per trajectory; empty without tools."""
    r = a.tools
    if r is None:
        return ""
    rows = [
        [t.tool, len(t.latencies_ms), t.percentile(50), t.percentile(99), t.errors]
        + [", ".join(f"{k} {v}" for k, v in sorted(t.statuses.items()))]
        for t in r.tools
    ]
    turns = ", ".join(f"{k} calls: {v}" for k, v in sorted(Counter(r.turns).items()))
    ends = ", ".join(f"{k} {v}" for k, v in sorted(r.finishes.items()))
    head = ["tool", "calls", "p50 ms", "p99 ms", "errors", "statuses"]
    return (
        "<h2>Tools</h2>"
        + f"<p>{len(r.turns)} trajectories, {r.calls} tool calls: {fmt(r.calls_per_sample)} per sample. "
        + escape(f"Turns per trajectory: {turns}. Trajectories ended by: {ends}.")
        + "</p>"
        + (table(head, rows) if rows else "")
    )


def _staleness_section(a: Analysis) -> str:
    """Continuous rollouts: the lag of trained tokens, the engine's running batch; empty without versions."""
    r = a.staleness
    if r is None:
        return ""
    total = sum(r.lag_tokens.values())
    rows = [[lag, int(n), 100.0 * n / total] for lag, n in r.lag_tokens.items()] if total else []
    full = (
        f" It ran at >= 80 % of its admitted size for {fmt(100 * r.full_frac)} % of generation time."
        if r.full_frac is not None
        else ""
    )
    return (
        "<h2>Rollout staleness</h2>"
        + f"<p>Mean lag of trained tokens: {fmt(r.lag_mean)} policy versions; largest per-sample version span "
        + f"{fmt(r.span_max)}; decoupled-PPO weights' mean ESS {fmt(r.ess)}. Engine running batch (sampled "
        + f"{len(r.running)} times): p10 {fmt(r.running_percentile(10))}, median {fmt(r.running_percentile(50))}, "
        + f"p90 {fmt(r.running_percentile(90))}.{full}</p>"
        + (table(["lag", "tokens", "%"], rows) if rows else "")
        + _step_cost_table(r)
    )


def _step_cost_table(r: StalenessReport) -> str:
    """The per-engine-step cost curve: where generation time goes as the running batch grows."""
    if not r.step_cost:
        return ""
    rows = [
        [
            f"{b.lo}-{b.hi - 1}" if b.hi is not None else f">= {b.lo}",
            b.steps,
            f"{b.ms_per_step:.2f}",
            f"{b.us_per_request:.1f}",
            f"{100 * b.engine_share:.0f}",
            f"{b.tokens_per_s:,.0f}",
        ]
        for b in r.step_cost
    ]
    head = ["running batch", "engine steps", "ms / step", "µs / request-step", "% in advance", "tokens/s"]
    return (
        "<p>Engine step cost by running batch (all steps; the round: the engine step, taking its outputs, "
        "admission; flat µs / request-step is a per-request cost, falling is a per-step one):</p>"
        + table(head, rows)
    )


SPECULATIVE = (
    ("speculative/acceptance_rate", "acceptance rate"),
    ("speculative/accepted_len_mean", "accepted tokens / draft"),
    ("speculative/steps_per_token", "decode steps / token"),
)


def _speculative_section(a: Analysis) -> str:
    """rollout.speculative: per step, vLLM's draft acceptance and the decode steps a token cost; empty when off."""
    rows = [
        [r.get("step", "?"), *(r.get(k) for k, _ in SPECULATIVE)]
        for r in a.metrics
        if isinstance(r.get(SPECULATIVE[0][0]), int | float)
    ]
    if not rows:
        return ""
    mean = {k: sum(float(row[i + 1]) for row in rows) / len(rows) for i, (k, _) in enumerate(SPECULATIVE)}
    return (
        "<h2>Speculative decoding</h2>"
        + f"<p>Mean over {len(rows)} steps: acceptance rate {fmt(mean[SPECULATIVE[0][0]])}, "
        + f"{fmt(mean[SPECULATIVE[1][0]])} accepted tokens per draft, "
        + f"{fmt(mean[SPECULATIVE[2][0]])} decode steps per generated token (1 = no gain).</p>"
        + table(["step", *(label for _, label in SPECULATIVE)], rows)
    )


def _curves_section(a: Analysis, figs: dict[str, bytes | None]) -> str:
    train_rows = [r for r in a.metrics if not any(str(k).startswith("eval/") for k in r)]
    last = (train_rows or a.metrics or [{}])[-1]
    rows = [[k, v] for k, v in last.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    final = (
        _details(f"last metrics row (step {last.get('step', '?')})", table(["metric", "value"], rows))
        if rows
        else ""
    )
    return "<h2>Training curves</h2>" + image(figs["curves"], "training curves") + final


def render_html(
    a: Analysis, figs: dict[str, bytes | None], *, run_name: str, config: dict[str, Any], samples: str = ""
) -> str:
    """The page; ``samples`` is the ready "Samples" section (``report.samples``), placed after the curves."""
    cfg = (
        _details("resolved config", f"<pre>{escape(yaml.safe_dump(config, sort_keys=False))}</pre>")
        if config
        else ""
    )
    body = "".join(
        [
            _header(a, run_name),
            _time_section(a, figs),
            _handoff_section(a, figs),
            _comm_section(a),
            _throughput_section(a, figs),
            _memory_section(a, figs),
            _grading_section(a, figs),
            _tools_section(a),
            _staleness_section(a),
            _speculative_section(a),
            _curves_section(a, figs),
            samples,
            cfg,
        ]
    )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>rrl report: {escape(run_name)}</title>'
        f"<style>{CSS}</style></head><body>{body}</body></html>\n"
    )
