"""`rrl report` with tools: calls per sample, latency p50/p99 and errors per tool, turns per trajectory, from
the counters the tool loop writes (``trainer.tool_collect.trace_tools``); nothing shown for runs without tools."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from reasoning_rl.report import analyze, load_run, write_report
from reasoning_rl.rollout import Completion
from reasoning_rl.rollout.multiturn import ToolTurn
from reasoning_rl.tools import ToolResult
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.tool_collect import trace_tools

LAT_MS = [float(x) for x in range(10, 110, 10)]  # 10 python calls


def _completions() -> list[Completion]:
    out = []
    for k in range(6):  # calls per trajectory: 2, 2, 2, 2, 2, 0 -> 10 calls, 6 samples
        turns = [
            ToolTurn("python", {"code": "1"}, ToolResult("", status, LAT_MS[2 * k + c] / 1000))
            for c in range(2 if k < 5 else 0)
            for status in ["timeout" if (k, c) == (0, 1) else "ok"]
        ]
        out.append(Completion(k, 0, [1], [], [], "", "stop" if k < 5 else "length", mask=[], turns=turns))
    broken = ToolTurn("calculator", {"expression": "1"}, ToolResult("", "infra_error", 0.005))
    return [*out, Completion(6, 0, [1], [], [], "", "error", mask=[], turns=[broken])]


def _run(root: Path, tools: bool) -> Path:
    root.mkdir(parents=True)
    tw = TraceWriter(root / "trace.jsonl", meta={"run": "t", "device": "cpu", "world_size": 1})
    tw.add_span("generate", 1, 100.0, 110.0)
    if tools:
        trace_tools(tw, 1, _completions())
    tw.close()
    (root / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    return root


def test_tool_numbers_come_from_the_trace(tmp_path: Path) -> None:
    r = analyze(load_run(_run(tmp_path / "run", tools=True))).tools
    assert r is not None and r.calls == 11 and len(r.turns) == 7
    assert r.calls_per_sample == pytest.approx(11 / 7)
    py, calc = r.tools[1], r.tools[0]
    assert (py.tool, calc.tool) == ("python", "calculator")
    assert py.percentile(50) == pytest.approx(float(np.percentile(LAT_MS, 50)))
    assert py.percentile(99) == pytest.approx(float(np.percentile(LAT_MS, 99)))
    assert py.errors == 1 and py.statuses == {"ok": 9, "timeout": 1} and calc.errors == 1
    assert sorted(r.turns) == [0, 1, 2, 2, 2, 2, 2] and r.finishes == {"stop": 5, "length": 1, "error": 1}


def test_html_has_a_tools_section_only_for_tool_runs(tmp_path: Path) -> None:
    html = write_report(_run(tmp_path / "tools", tools=True)).html.read_text()
    assert "<h2>Tools</h2>" in html and "7 trajectories, 11 tool calls: 1.57 per sample" in html
    assert "2 calls: 5" in html and "timeout 1" in html
    plain = write_report(_run(tmp_path / "plain", tools=False)).html.read_text()
    assert "<h2>Tools</h2>" not in plain
