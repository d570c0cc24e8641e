"""The run trace: a versioned JSONL schema of per-step stage timings, bytes and counters.

One JSON object per line, written and flushed as it happens so a crashed or running job leaves a readable
prefix. Every record has ``v`` (schema version) and ``type``:

- ``meta``  (first line): ``run`` (name), ``started`` (unix s), ``model`` (``params``, ``layers``,
  ``hidden``, ``vocab``, ``dtype`` when known), ``device`` (``cpu`` | ``cuda``), optional ``device_name``
  (e.g. ``NVIDIA H200``: picks the peak FLOP/s for MFU) and ``peak_flops`` (per device, overrides the
  table), ``world_size``, free-form ``info``.
- ``span``: ``step``, ``stage`` (one of ``STAGES`` or a custom name), ``start``/``end`` (unix s), ``attrs``.
  A step's time in a stage is the sum of its spans of that stage.
- ``counter``: ``step``, ``name``, ``value`` (float), ``attrs``. Known names (several records of one name in
  one step, e.g. one per rank with ``attrs.rank``, are summed unless said otherwise):

  - ``handoff_bytes``: bytes the weight hand-off moved (GB/s = bytes / the step's ``handoff`` span seconds);
  - ``tokens_generated``: response tokens generated (tokens/s over the ``generate`` spans);
  - ``tokens_trained``: tokens the update processed, each epoch counted (tokens/s over ``update``);
  - ``tokens_computed``: of those, the tokens run forward and backward (rows with an exactly zero advantage are
    skipped, ``algorithm.skip_zero_advantage``): MFU counts these (older traces without it: ``tokens_trained``);
  - ``gpu_mem_peak_bytes``: peak allocated memory of one device (``attrs.rank``); readers take the max;
  - ``grade_latency_ms``: one per graded sample; attrs ``grader``, ``verdict``, ``cached`` (bool), optional
    ``timeout`` (bool: the grade hit its time budget). A record with ``attrs.stat`` (``p50``, ``p95``,
    ``p99``, ``max``) is instead that statistic over the grades so far, as the grading runtime reports it.
  - ``grade_count``, ``grade_cache_hits``, ``grade_timeouts``: totals so far per grader (``attrs.grader``),
    as the grading runtime counts them; readers take the latest value (for runs without per-sample records).
  - ``engine_steps``: the step's engine steps in one running-batch bucket (``attrs.lo``, ``hi``), with their
    ``requests``, ``seconds``, ``engine_s`` and ``tokens`` summed (``reasoning_rl/step_cost.py``).
- ``end``: ``status`` (``ok`` | ``crashed`` | ``interrupted``), ``ended``.

Readers must ignore unknown fields and record types; a bump of ``v`` means an incompatible change.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SCHEMA_VERSION = 1
# Progress inside a stage (the heartbeat's, trainer/heartbeat.py; never written to the file), defined once here: a
# count is (k, K), k of K done or under way (``generated=(12, 32)``, ``mini-batch=(2, 4)``,
# ``micro-batch=(3, 8)``); a stage's report is all of its counts by name (``Counts``); ``Progress`` is one count
# as it advances, for code that knows nothing of stages or names (a train step's micro-batches).
Counts = dict[str, tuple[int, int]]
OnProgress = Callable[[str, Counts], None]  # (stage, all its counts now)
Progress = Callable[[int, int], None]  # (k, K)
STAGES = ("generate", "grade_wait", "ref_logprobs", "old_logprobs", "update", "handoff", "checkpoint", "eval")


class TraceWriter:
    """Append-only trace file; every record is flushed so a partial trace survives a crash."""

    def __init__(self, path: str | Path, *, meta: dict[str, Any] | None = None, append: bool = False) -> None:
        self.on_progress: OnProgress | None = None  # the run's heartbeat; not written to the file
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        resuming = append and self.path.exists()
        self._fh: IO[str] = self.path.open("a" if append else "w", encoding="utf-8")
        if not resuming:
            self._write({"type": "meta", "started": time.time(), **(meta or {})})

    def _write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps({"v": SCHEMA_VERSION, **record}, default=str) + "\n")
        self._fh.flush()

    @contextmanager
    def span(self, stage: str, step: int, **attrs: Any) -> Iterator[dict[str, Any]]:
        """Time a stage; the yielded dict can be filled with attributes known only at the end."""
        self.progress(stage)
        start = time.time()
        extra: dict[str, Any] = dict(attrs)
        try:
            yield extra
        finally:
            self._write(
                {
                    "type": "span",
                    "step": step,
                    "stage": stage,
                    "start": start,
                    "end": time.time(),
                    "attrs": extra,
                }
            )

    def progress(self, stage: str, **counts: tuple[int, int]) -> None:
        """Where a stage is: all its counts (``Counts``), e.g. ``generated=(12, 32)``; for the heartbeat only."""
        if self.on_progress is not None:
            self.on_progress(stage, counts)

    def add_span(self, stage: str, step: int, start: float, end: float, **attrs: Any) -> None:
        self._write(
            {"type": "span", "step": step, "stage": stage, "start": start, "end": end, "attrs": attrs}
        )

    def counter(self, name: str, step: int, value: float, **attrs: Any) -> None:
        self._write({"type": "counter", "step": step, "name": name, "value": float(value), "attrs": attrs})

    def close(self, status: str = "ok") -> None:
        if not self._fh.closed:
            self._write({"type": "end", "status": status, "ended": time.time()})
            self._fh.close()


@dataclass
class Trace:
    """A parsed trace. ``warnings`` lists what was wrong with the file (e.g. a truncated last line)."""

    meta: dict[str, Any] = field(default_factory=dict)
    spans: list[dict[str, Any]] = field(default_factory=list)
    counters: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.end is not None


def read_trace(path: str | Path) -> Trace:
    """Parse a trace, tolerating a torn last line and unknown records (both reported in ``warnings``)."""
    trace = Trace()
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            trace.warnings.append(f"{path}:{lineno}: unreadable line (truncated write?), ignored")
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("v", SCHEMA_VERSION), int):
            trace.warnings.append(
                f"{path}:{lineno}: not a trace record (JSON object with an integer v), ignored"
            )
            continue
        if rec.get("v", SCHEMA_VERSION) > SCHEMA_VERSION:
            raise ValueError(
                f"{path}:{lineno}: trace schema v{rec['v']} is newer than this reader (v{SCHEMA_VERSION})"
            )
        kind = rec.get("type")
        if kind == "meta":
            trace.meta = rec
        elif kind == "span":
            trace.spans.append(rec)
        elif kind == "counter":
            trace.counters.append(rec)
        elif kind == "end":
            trace.end = rec
    if trace.end is None:
        trace.warnings.append(
            f"{path}: no end record: the run is still going or crashed; showing what exists"
        )
    for w in trace.warnings:
        warnings.warn(w, stacklevel=2)
    return trace
