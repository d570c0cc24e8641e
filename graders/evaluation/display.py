"""The summary tables ``rrl grade`` prints."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

RATE_PREFIXES = ("mean_score", "pass@", "maj@")


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def rate_columns(summary: dict[str, Any]) -> list[str]:
    keys = [k for k in summary["overall"] if k.startswith(RATE_PREFIXES)]
    return sorted(
        keys,
        key=lambda k: (
            RATE_PREFIXES.index(next(p for p in RATE_PREFIXES if k.startswith(p))),
            int(k.split("@")[1]) if "@" in k else 0,
            k,
        ),
    )


def console_columns(summary: dict[str, Any]) -> list[str]:
    """mean_score, the largest pass@k and maj@k: what fits a terminal (the JSON/HTML have every k)."""
    cols = rate_columns(summary)
    passes = [c for c in cols if c.startswith("pass@")]
    majs = [c for c in cols if c.startswith("maj@")]
    return ["mean_score", *passes[-1:], *majs]


def print_summary(console: Console, summary: dict[str, Any], run: dict[str, Any]) -> None:
    cols = console_columns(summary)
    table = Table(title="rrl grade: results", title_justify="left")
    for name in ["data_source", "rows", "responses", *cols, "errors", "malformed"]:
        table.add_column(name, justify="left" if name == "data_source" else "right")
    sources = summary["by_source"]
    for source, m in [*sources.items(), ("ALL", summary["overall"])]:
        if source == "ALL" and len(sources) > 1:
            table.add_section()
        elif source == "ALL":
            continue  # one source: its row already is the total
        table.add_row(
            source,
            str(m["rows"]),
            str(m["responses"]),
            *[_fmt(m.get(c)) for c in cols],
            str(m["verdicts"].get("error", 0)),
            str(m["malformed_rows"]),
        )
    console.print(table)

    overall = summary["overall"]
    breakdown = Table(title="verdicts and errors (responses)", title_justify="left")
    breakdown.add_column("kind")
    breakdown.add_column("count", justify="right")
    for verdict in ("correct", "incorrect", "error"):
        breakdown.add_row(verdict, str(overall["verdicts"].get(verdict, 0)))
    for reason, count in sorted(overall["errors"].items(), key=lambda kv: -kv[1]):
        breakdown.add_row(f"  error: {reason}", str(count))
    console.print(breakdown)

    perf = Table(title="this run", title_justify="left")
    for name in ("grader", "graded", "cache hits", "timeouts", "retries", "p50 ms", "p95 ms", "p99 ms"):
        perf.add_column(name, justify="left" if name == "grader" else "right")
    for name, g in run["pool"]["graders"].items():
        lat = g["latency_ms"]
        perf.add_row(
            name,
            str(g["count"]),
            str(g["cache_hits"]),
            str(g["timeouts"]),
            str(g["retries"]),
            _fmt(lat["p50"]),
            _fmt(lat["p95"]),
            _fmt(lat["p99"]),
        )
    console.print(perf)
    console.print(
        f"{run['rows_written']} rows written ({run['rows_skipped']} already done"
        + (f", {run['rows_over_limit']} past --limit left out" if run.get("rows_over_limit") else "")
        + "), "
        f"{run['responses_graded']} responses"
        + (
            f" (+{run['equivalence_checks']} maj@k equivalence checks)"
            if run.get("equivalence_checks")
            else ""
        )
        + f" in {run['seconds']:.1f}s = "
        f"{run['responses_graded'] / run['seconds'] if run['seconds'] > 0 else 0:,.1f} responses/s "
        f"on {run['pool'].get('backend')} workers over {len(run['pool'].get('nodes', {}))} node(s)"
    )
