"""The freshness gate and rollout/trainer mismatch in ``rrl report``: per step, from metrics.jsonl."""

from __future__ import annotations

from statistics import median
from typing import Any

GATE_KEYS = (
    "handoff/probe_gap",
    "handoff/probe_gap_max",
    "handoff/probe_tol",
    "handoff/check_seconds",
    "handoff/seconds",
)
MISMATCH_KEYS = ("mismatch/kl", "mismatch/max_abs", "mismatch/frac_over", "correction/weight_mean")


def _rows(metrics: list[dict[str, Any]], keys: tuple[str, ...]) -> list[list[Any]]:
    return [
        [r["step"], *(r.get(k) for k in keys)]
        for r in metrics
        if isinstance(r.get("step"), int) and r.get(keys[0]) is not None
    ]


def gate_summary(metrics: list[dict[str, Any]]) -> str | None:
    """One sentence on the gate: steps checked, worst probe gap vs tolerance, cost vs step time."""
    rows = [
        r for r in metrics if isinstance(r.get("step"), int) and r.get("handoff/check_seconds") is not None
    ]
    if not rows:
        return None
    cost = [float(r["handoff/check_seconds"]) for r in rows]
    share = [
        float(r["handoff/check_seconds"]) / float(r["time/step_s"]) for r in rows if r.get("time/step_s")
    ]
    worst = max(float(r.get("handoff/probe_gap", 0.0)) for r in rows)
    tol = rows[-1].get("handoff/probe_tol")
    return (
        f"Freshness gate passed {len(rows)} hand-offs: worst probe gap {worst:.3g} nats/token "
        f"(tolerance {tol:.3g}); check {median(cost):.3g} s median"
        + (f", {100 * median(share):.2f} % of step time" if share else "")
        + "."
    )


def freshness_html(metrics: list[dict[str, Any]], table: Any, details: Any) -> str:
    """HTML for the hand-off section (``table``/``details``: report.html's helpers)."""
    out = ""
    summary = gate_summary(metrics)
    if summary is not None:
        out += f"<p>{summary}</p>" + details(
            "freshness gate per step",
            table(
                ["step", "probe gap", "probe gap max", "tolerance", "check s", "hand-off s"],
                _rows(metrics, GATE_KEYS),
            ),
        )
    mismatch = _rows(metrics, MISMATCH_KEYS)
    if mismatch:
        out += "<h3>Rollout/trainer mismatch</h3>" + details(
            "per step",
            table(
                ["step", "KL (k3)", "max |Δ log p|", "share over threshold", "correction weight mean"],
                mismatch,
            ),
        )
    return out
