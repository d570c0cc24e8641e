"""``--report``: a self-contained HTML page (inline PNG plots) with the same numbers as the console summary."""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path
from typing import Any

from graders.evaluation.display import console_columns, rate_columns


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _plots(summary: dict[str, Any], pool: dict[str, Any]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: list[tuple[str, str]] = []
    cols = console_columns(summary)
    sources = {s: m for s, m in summary["by_source"].items() if m["responses"]}
    fig, ax = plt.subplots(figsize=(min(14.0, max(5.0, 1.0 + 0.9 * len(sources) * len(cols) / 2)), 3.5))
    width = 0.8 / max(1, len(cols))
    for i, col in enumerate(cols):
        vals = [m.get(col) or 0.0 for m in sources.values()]
        ax.bar([x + i * width for x in range(len(sources))], vals, width, label=col)
    ax.set_xticks([x + width * (len(cols) - 1) / 2 for x in range(len(sources))], list(sources), rotation=20)
    ax.set_ylim(0, 1)
    ax.set_ylabel("score")
    ax.legend(fontsize="small")
    ax.set_title("score by data source")
    out.append(("Score by data source", _png(fig)))
    plt.close(fig)

    edges: list[float] = []
    counts: list[int] = []
    for g in pool.get("graders", {}).values():
        edges = g["latency_hist"]["edges_ms"]
        counts = [
            a + b
            for a, b in zip(
                counts or [0] * len(g["latency_hist"]["counts"]), g["latency_hist"]["counts"], strict=True
            )
        ]
    if counts and sum(counts):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        lefts = [edges[0] / 10**0.25, *edges]
        rights = [*edges, edges[-1] * 10**0.25]
        used = [i for i, c in enumerate(counts) if c]
        lo, hi = used[0], used[-1] + 1
        ax.bar(
            lefts[lo:hi],
            counts[lo:hi],
            width=[r - left for left, r in zip(lefts[lo:hi], rights[lo:hi], strict=True)],
            align="edge",
        )
        ax.set_xscale("log")
        ax.set_xlabel("grade latency (ms, per response)")
        ax.set_ylabel("responses")
        ax.set_title("latency histogram (this run)")
        out.append(("Latency histogram", _png(fig)))
        plt.close(fig)
    return out


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "-" if math.isnan(v) else f"{v:.4f}"
        return html.escape("-" if v is None else str(v))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_report(path: Path, summary: dict[str, Any], run: dict[str, Any], title: str) -> None:
    cols = rate_columns(summary)
    src_rows = [
        [
            s,
            m["rows"],
            m["responses"],
            *[m.get(c) for c in cols],
            m["verdicts"].get("error", 0),
            m["malformed_rows"],
        ]
        for s, m in [*summary["by_source"].items(), ("ALL", summary["overall"])]
    ]
    overall = summary["overall"]
    verdict_rows = [[v, overall["verdicts"].get(v, 0)] for v in ("correct", "incorrect", "error")]
    verdict_rows += [[f"error: {r}", c] for r, c in sorted(overall["errors"].items(), key=lambda kv: -kv[1])]
    perf_rows = [
        [
            n,
            g["count"],
            g["cache_hits"],
            g["timeouts"],
            g["retries"],
            g["latency_ms"]["p50"],
            g["latency_ms"]["p95"],
            g["latency_ms"]["p99"],
        ]
        for n, g in run["pool"]["graders"].items()
    ]
    seconds = run["seconds"]
    plots = "".join(
        f'<h2>{html.escape(t)}</h2><img alt="{html.escape(t)}" src="data:image/png;base64,{b}">'
        for t, b in _plots(summary, run["pool"])
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:70em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:.3em .6em;text-align:right}}td:first-child,th:first-child{{text-align:left}}</style>
</head><body><h1>{html.escape(title)}</h1>
<h2>Results by data source</h2>{_table(["data_source", "rows", "responses", *cols, "errors", "malformed"], src_rows)}
<h2>Verdicts and errors (responses)</h2>{_table(["kind", "count"], verdict_rows)}
<h2>This run</h2>{_table(["grader", "graded", "cache hits", "timeouts", "retries", "p50 ms", "p95 ms", "p99 ms"], perf_rows)}
<p>{run["responses_graded"]} responses in {seconds:.1f}s ({run["responses_graded"] / seconds if seconds > 0 else 0:,.1f}/s),
backend {html.escape(str(run["pool"].get("backend")))}, {len(run["pool"].get("nodes", {}))} node(s).</p>
{plots}</body></html>"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
