"""Read a run directory (``trace.jsonl``, ``metrics.jsonl``, ``config.yaml``) as far as it exists.

A running or crashed run leaves torn last lines and missing files: everything readable is kept and every
gap becomes a warning shown at the top of the report, never a traceback.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reasoning_rl.trace import Trace, read_trace


class ReportError(ValueError):
    """The run directory cannot yield any report; the message says which file is missing or wrong."""


@dataclass
class RunData:
    run_dir: Path
    trace: Trace
    metrics: list[dict[str, Any]]
    config: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def read_metrics(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            problems.append(f"{path}:{lineno}: unreadable metrics line (truncated write?), ignored")
            continue
        if not isinstance(row, dict):
            problems.append(f"{path}:{lineno}: metrics line is not a JSON object, ignored")
            continue
        rows.append(row)
    return rows, problems


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _drop_malformed(trace: Trace, notes: list[str]) -> None:
    """Spans/counters whose fields have the wrong types are left out, and counted in a warning."""
    spans = [
        s
        for s in trace.spans
        if isinstance(s.get("step"), int)
        and _is_number(s.get("start"))
        and _is_number(s.get("end"))
        and isinstance(s.get("stage"), str)
    ]
    counters = [
        c
        for c in trace.counters
        if isinstance(c.get("step"), int) and _is_number(c.get("value")) and isinstance(c.get("name"), str)
    ]
    dropped = len(trace.spans) - len(spans) + len(trace.counters) - len(counters)
    if dropped:
        notes.append(
            f"{dropped} span/counter record(s) with missing or mistyped fields (step, stage, start, end, "
            "name, value) ignored"
        )
    trace.spans, trace.counters = spans, counters
    for rec in (*spans, *counters):
        if not isinstance(rec.get("attrs"), dict):
            rec["attrs"] = {}


def load_run(run_dir: str | Path) -> RunData:
    root = Path(run_dir)
    if not root.is_dir():
        raise ReportError(f"{root}: run directory not found")
    trace_path, metrics_path, config_path = root / "trace.jsonl", root / "metrics.jsonl", root / "config.yaml"
    if not trace_path.is_file() and not metrics_path.is_file():
        raise ReportError(
            f"{root}: neither trace.jsonl nor metrics.jsonl found; is this a run directory of `rrl train`?"
        )
    notes: list[str] = []
    trace = Trace()
    if trace_path.is_file():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                trace = read_trace(trace_path)
            except ValueError as exc:
                raise ReportError(str(exc)) from exc
        notes.extend(trace.warnings)
        _drop_malformed(trace, notes)
    else:
        notes.append(f"{trace_path}: missing; stage timings come from metrics.jsonl only")
    metrics: list[dict[str, Any]] = []
    if metrics_path.is_file():
        metrics, problems = read_metrics(metrics_path)
        notes.extend(problems)
    else:
        notes.append(f"{metrics_path}: missing; no reward/accuracy curves")
    config: dict[str, Any] = {}
    if config_path.is_file():
        try:
            loaded = yaml.safe_load(config_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            notes.append(f"{config_path}: not valid YAML ({exc}); config not shown")
        else:
            config = loaded if isinstance(loaded, dict) else {}
    if trace.end is not None and trace.end.get("status") not in (None, "ok"):
        notes.append(f"the run ended with status {trace.end.get('status')!r}")
    return RunData(root, trace, metrics, config, notes)
