"""The report's tool numbers: calls per sample, tool latency p50/p99 and errors per tool, turns per trajectory,
from the trace's ``tool_latency_ms`` (one per call) and ``tool_turns`` (one per trajectory) counters."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

OK_STATUSES = ("ok",)


@dataclass
class ToolCalls:
    tool: str
    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)

    @property
    def errors(self) -> int:
        """Calls that went wrong (timeout, crash, bad call, infrastructure), shown to the model or not."""
        return sum(n for s, n in self.statuses.items() if s not in OK_STATUSES)

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")


@dataclass
class ToolReport:
    tools: list[ToolCalls]
    turns: list[int]  # calls per trajectory, one entry per trajectory
    finishes: Counter[str]

    @property
    def calls(self) -> int:
        return sum(len(t.latencies_ms) for t in self.tools)

    @property
    def calls_per_sample(self) -> float:
        return self.calls / len(self.turns) if self.turns else float("nan")


def tool_report(counters: list[dict[str, Any]]) -> ToolReport | None:
    """None when the run used no tools (no tool counters in the trace)."""
    by_tool: dict[str, ToolCalls] = {}
    turns: list[int] = []
    finishes: Counter[str] = Counter()
    for c in counters:
        attrs = c.get("attrs") or {}
        if c.get("name") == "tool_latency_ms":
            t = by_tool.setdefault(str(attrs.get("tool", "?")), ToolCalls(str(attrs.get("tool", "?"))))
            t.latencies_ms.append(float(c.get("value", 0.0)))
            t.statuses[str(attrs.get("status", "?"))] += 1
        elif c.get("name") == "tool_turns":
            turns.append(int(c.get("value", 0)))
            finishes[str(attrs.get("finish", "?"))] += 1
    if not by_tool and not turns:
        return None
    return ToolReport(sorted(by_tool.values(), key=lambda t: t.tool), turns, finishes)
