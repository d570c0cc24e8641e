"""The per-engine-step cost curve (``reasoning_rl/step_cost.py``, issue 44): a scripted sequence of engine steps
(running batch, round seconds, seconds inside ``advance``, tokens), times injected, so every sum is exact."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from reasoning_rl.step_cost import COUNTER, Bucket, StepCost, curve_lines, pooled
from reasoning_rl.trace import TraceWriter, read_trace

# (running, seconds, engine_s, tokens); width 4, target 10: buckets 0-3, 4-7, 8-11 and >= 12 (open)
STEP_1 = [
    (10, 0.5, 0.25, 10),
    (9, 0.25, 0.25, 9),
    (8, 0.25, 0.125, 8),
    (3, 0.125, 0.0625, 3),
    (0, 0.0625, 0.0, 0),
]
STEP_2 = [(12, 1.0, 0.5, 12), (40, 2.0, 1.0, 40), (5, 0.5, 0.5, 5)]


def _run(cost: StepCost, steps: list[tuple[int, float, float, int]]) -> None:
    for running, seconds, engine_s, tokens in steps:
        cost.add(running, seconds, engine_s, tokens)


def test_steps_sum_into_fixed_buckets_the_last_open() -> None:
    cost = StepCost(target=10, width=4)
    _run(cost, STEP_1)
    assert cost.buckets() == [
        Bucket(0, 4, steps=2, requests=3, seconds=0.1875, engine_s=0.0625, tokens=3),
        Bucket(8, 12, steps=3, requests=27, seconds=1.0, engine_s=0.625, tokens=27),
    ]
    _run(cost, STEP_2)  # 12 and 40 are both at or above the target rounded up to a width: the open bucket
    assert [(b.lo, b.hi, b.steps, b.requests) for b in cost.buckets()] == [
        (0, 4, 2, 3),
        (4, 8, 1, 5),
        (8, 12, 3, 27),
        (12, None, 2, 52),
    ]


def test_a_target_on_a_bucket_edge_opens_the_bucket_at_the_target() -> None:
    cost = StepCost(target=8, width=4)
    _run(cost, [(7, 1.0, 1.0, 7), (8, 1.0, 1.0, 8), (1000, 1.0, 1.0, 1000)])
    assert [(b.lo, b.hi, b.steps) for b in cost.buckets()] == [(4, 8, 1), (8, None, 2)]


def test_the_curve_per_step_and_per_request_step() -> None:
    b = Bucket(8, 12, steps=3, requests=27, seconds=1.0, engine_s=0.625, tokens=27)
    assert b.ms_per_step == pytest.approx(1e3 / 3)
    assert b.us_per_request == pytest.approx(1e6 / 27)
    assert b.engine_share == pytest.approx(0.625)
    assert b.tokens_per_s == pytest.approx(27.0)
    empty = Bucket(0, 4)
    assert math.isnan(empty.ms_per_step) and math.isnan(empty.us_per_request)


def test_flush_writes_each_steps_buckets_and_pooled_sums_them_back(tmp_path: Path) -> None:
    """Per training step: the non-empty buckets as trace counters and the metrics line's summary, the sums
    zeroed; ``pooled`` over the trace gives the two steps' buckets summed (or only the steps asked for)."""
    cost = StepCost(target=10, width=4)
    trace = TraceWriter(tmp_path / "trace.jsonl")
    _run(cost, STEP_1)
    assert cost.flush(trace, 1) == {"rollout/engine_steps": 5.0, "rollout/engine_step_ms": 1e3 * 1.1875 / 5}
    assert cost.buckets() == []
    assert cost.flush(trace, 2) == {"rollout/engine_steps": 0.0, "rollout/engine_step_ms": 0.0}
    _run(cost, STEP_1 + STEP_2)
    cost.flush(trace, 3)
    trace.close()
    counters = read_trace(tmp_path / "trace.jsonl").counters
    assert [(c["step"], c["value"], c["attrs"]["lo"]) for c in counters if c["name"] == COUNTER] == [
        (1, 2.0, 0),
        (1, 3.0, 8),
        (3, 2.0, 0),
        (3, 1.0, 4),
        (3, 3.0, 8),
        (3, 2.0, 12),
    ]
    both = pooled(counters)
    assert both == [
        Bucket(0, 4, steps=4, requests=6, seconds=0.375, engine_s=0.125, tokens=6),
        Bucket(4, 8, steps=1, requests=5, seconds=0.5, engine_s=0.5, tokens=5),
        Bucket(8, 12, steps=6, requests=54, seconds=2.0, engine_s=1.25, tokens=54),
        Bucket(12, None, steps=2, requests=52, seconds=3.0, engine_s=1.5, tokens=52),
    ]
    assert pooled(counters, steps={1}) == [
        Bucket(0, 4, steps=2, requests=3, seconds=0.1875, engine_s=0.0625, tokens=3),
        Bucket(8, 12, steps=3, requests=27, seconds=1.0, engine_s=0.625, tokens=27),
    ]
    lines = curve_lines(both)
    assert len(lines) == 5 and lines[1].split()[:2] == ["0-3", "4"] and lines[4].split()[:2] == [">=12", "2"]
    assert float(lines[3].split()[2]) == pytest.approx(1e3 * 2.0 / 6, abs=0.01)  # ms per step


def test_bucket_width_must_be_positive() -> None:
    with pytest.raises(ValueError, match="width"):
        StepCost(target=8, width=0)


def test_a_bucket_width_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="bucket width must be >= 1, got 0"):
        StepCost(target=8, width=0)
