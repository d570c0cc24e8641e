"""The run-trace schema: what writers emit is what readers get, and damaged files still read."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from reasoning_rl.trace import SCHEMA_VERSION, TraceWriter, read_trace


def _read(path: Path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = read_trace(path)
    return trace, [str(w.message) for w in caught]


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "t" / "trace.jsonl"
    tw = TraceWriter(path, meta={"run": "r", "model": {"params": 7}})
    with tw.span("generate", 0, engine="vllm") as extra:
        extra["samples"] = 4
    tw.add_span("update", 0, 10.0, 12.5)
    tw.counter("handoff_bytes", 0, 1024, method="reload_weights")
    tw.close()
    trace, emitted = _read(path)
    assert trace.complete and trace.end is not None and trace.end["status"] == "ok" and emitted == []
    assert trace.meta["run"] == "r" and trace.meta["model"] == {"params": 7} and trace.meta["started"] > 0
    gen, upd = trace.spans
    assert (
        gen["stage"] == "generate"
        and gen["attrs"] == {"engine": "vllm", "samples": 4}
        and gen["end"] >= gen["start"]
    )
    assert (upd["start"], upd["end"]) == (10.0, 12.5)
    assert trace.counters == [
        {
            "v": SCHEMA_VERSION,
            "type": "counter",
            "step": 0,
            "name": "handoff_bytes",
            "value": 1024.0,
            "attrs": {"method": "reload_weights"},
        }
    ]
    assert all(json.loads(line)["v"] == SCHEMA_VERSION for line in path.read_text().splitlines())


def test_span_is_written_when_the_stage_raises(tmp_path: Path) -> None:
    tw = TraceWriter(tmp_path / "trace.jsonl")
    with pytest.raises(RuntimeError), tw.span("update", 3):
        raise RuntimeError("oom")
    tw.close("crashed")
    trace, _ = _read(tmp_path / "trace.jsonl")
    assert [s["stage"] for s in trace.spans] == ["update"] and trace.end is not None
    assert trace.end["status"] == "crashed"


def test_resume_appends_without_a_second_meta(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    first = TraceWriter(path, meta={"run": "a"})
    first.add_span("generate", 0, 0.0, 1.0)
    first.close("interrupted")
    second = TraceWriter(path, meta={"run": "ignored"}, append=True)
    second.add_span("generate", 1, 2.0, 3.0)
    second.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["type"] for r in lines].count("meta") == 1
    trace, _ = _read(path)
    assert trace.meta["run"] == "a" and [s["step"] for s in trace.spans] == [0, 1]


def test_torn_unknown_and_foreign_lines_are_reported_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    tw = TraceWriter(path, meta={"run": "x"})
    tw.add_span("generate", 0, 0.0, 1.0)
    with path.open("a") as fh:
        fh.write(json.dumps({"v": 1, "type": "future_record", "x": 1}) + "\n")
        fh.write("[1, 2]\n")
        fh.write(json.dumps({"v": 1, "type": "span", "step": 1, "stage": "update"})[:20])
    trace, emitted = _read(path)
    assert len(trace.spans) == 1 and not trace.complete
    assert any("unreadable line" in w for w in trace.warnings)
    assert any("not a trace record" in w for w in trace.warnings)
    assert any("no end record" in w for w in trace.warnings)
    assert emitted == trace.warnings


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps({"v": SCHEMA_VERSION + 1, "type": "meta"}) + "\n")
    with pytest.raises(ValueError, match="newer than this reader"):
        read_trace(path)
