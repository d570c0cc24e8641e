"""The report's continuous-rollout numbers (issue 31): the lag histogram of trained tokens (trace counter
``lag_tokens``, one per step and lag), the engine's running batch over generation (``engine_running``,
sampled while it generates), the per-engine-step cost curve (``engine_steps``, ``reasoning_rl/step_cost``) and,
from the metrics line, the share of generation time it ran full, the
effective sample size of the decoupled-PPO weights and the per-sample version span."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from reasoning_rl.step_cost import Bucket, pooled


@dataclass
class StalenessReport:
    lag_tokens: dict[int, float]  # lag -> trained tokens, all steps
    running: list[float]  # the engine's running batch, as sampled
    full_frac: float | None  # mean over steps of rollout/running_full_frac
    ess: float | None  # mean decoupled/ess
    span_max: float | None  # largest per-sample version span
    step_cost: list[Bucket]  # engine steps by running batch, all steps pooled (empty in older runs)

    @property
    def lag_mean(self) -> float:
        total = sum(self.lag_tokens.values())
        return sum(k * v for k, v in self.lag_tokens.items()) / total if total else 0.0

    def running_percentile(self, q: float) -> float:
        return float(np.percentile(self.running, q)) if self.running else float("nan")


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]
    return sum(values) / len(values) if values else None


def staleness_report(counters: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> StalenessReport | None:
    """None for a run that recorded no versions (synchronous runs on engines that only stream)."""
    lags: dict[int, float] = {}
    running = []
    for c in counters:
        if c.get("name") == "lag_tokens":
            lag = int(c.get("attrs", {}).get("lag", 0))
            lags[lag] = lags.get(lag, 0.0) + float(c["value"])
        elif c.get("name") == "engine_running":
            running.append(float(c["value"]))
    step_cost = pooled(counters)
    if not lags and not running and not step_cost:
        return None
    spans = [
        float(r["staleness/span_max"])
        for r in metrics
        if isinstance(r.get("staleness/span_max"), int | float)
    ]
    return StalenessReport(
        dict(sorted(lags.items())),
        running,
        _mean(metrics, "rollout/running_full_frac"),
        _mean(metrics, "decoupled/ess"),
        max(spans) if spans else None,
        step_cost,
    )
