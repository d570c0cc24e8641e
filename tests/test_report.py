"""`rrl report`: numbers against the trace they come from, partial runs, and the HTML itself."""

from __future__ import annotations

import base64
import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from reasoning_rl.cli.app import app
from reasoning_rl.report import Analysis, ReportError, analyze, load_run, write_report
from reasoning_rl.report.html import render_html
from reasoning_rl.report.plots import FIGURES
from reasoning_rl.step_cost import COUNTER, StepCost, pooled
from reasoning_rl.trace import TraceWriter

STEPS = 4
# (stage, start, end) offsets within a step; step 2 also evaluates, leaving 0.5 s no stage covers.
LAYOUT = [
    ("generate", 0, 10),
    ("grade_wait", 10, 12),
    ("ref_logprobs", 12, 13),
    ("old_logprobs", 13, 14),
    ("update", 14, 20),
    ("handoff", 20, 20.5),
]
PARAMS, WORLD, H100 = 1_000_000_000, 2, 989e12
MATH_MS = [float(x) for x in range(1, 101)]


def make_run(root: Path, *, steps: int = STEPS, close: bool = True, meta: dict | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    meta = meta or {
        "run": "synthetic",
        "device": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "world_size": WORLD,
        "model": {"params": PARAMS, "dtype": "bfloat16"},
    }
    tw = TraceWriter(root / "trace.jsonl", meta=meta)
    metrics = []
    for step in range(steps):
        t0 = 1000.0 + 100 * step
        for stage, a, b in LAYOUT:
            tw.add_span(stage, step, t0 + a, t0 + b)
        if step == 2:
            tw.add_span("eval", step, t0 + 21, t0 + 22)
        tw.counter("handoff_bytes", step, 1e9)
        tw.counter("tokens_generated", step, 5000)
        tw.counter("tokens_trained", step, 3000, rank=0)
        tw.counter("tokens_trained", step, 3000, rank=1)
        tw.counter("gpu_mem_peak_bytes", step, (10 + step) * 2**30, rank=0)
        tw.counter("gpu_mem_peak_bytes", step, 5 * 2**30, rank=1)
        for i in range(25):
            ms = MATH_MS[25 * step + i]
            tw.counter(
                "grade_latency_ms",
                step,
                ms,
                grader="math",
                verdict="correct" if i < 5 * step else "incorrect",
                cached=i % 5 == 0,
            )
        tw.counter(
            "grade_latency_ms", step, 3000.0, grader="code", verdict="error", cached=False, timeout=True
        )
        tw.counter("grade_latency_ms", step, 40.0, grader="code", verdict="correct", cached=False)
        metrics.append(
            {
                "step": step,
                "reward_mean": 0.2 * step,
                "reward_std": 0.1,
                "accuracy": 0.2 * step,
                "response_len_mean": 100 - step,
                "kl": 0.01 * step,
                "entropy": 1.0 - 0.1 * step,
            }
        )
    if close:
        tw.close()
    (root / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (root / "config.yaml").write_text("run: {name: synthetic}\nrollout: {engine: vllm}\n")
    return root


def _html_without_figures(a: Analysis) -> str:
    """The page's text for an analysis, skipping the (slow) figure rendering."""
    return render_html(a, dict.fromkeys(FIGURES), run_name="t", config={})


def test_numbers_match_the_trace(tmp_path: Path) -> None:
    a = analyze(load_run(make_run(tmp_path / "run")))
    assert [t.step for t in a.timings] == list(range(STEPS))
    shares = a.stage_shares()
    assert sum(shares.values()) == pytest.approx(100.0)
    total = STEPS * 20.5 + 1.0 + 0.5  # every step's stages, plus step 2's eval and its 0.5 s gap
    assert shares["generate"] == pytest.approx(100 * STEPS * 10 / total)
    assert shares["other"] == pytest.approx(100 * 0.5 / total)
    assert a.stage_totals()["update"] == pytest.approx(STEPS * 6)

    for h in a.handoff:
        assert h.bytes == 1e9 and h.seconds == pytest.approx(0.5)
        assert h.gbps == pytest.approx(h.bytes / 1e9 / h.seconds) == pytest.approx(2.0)
    for t in a.throughput:
        assert t.gen_tps == pytest.approx(5000 / 10)
        assert t.update_tps == pytest.approx(6000 / 6)
        assert t.mfu == pytest.approx(6 * PARAMS * 6000 / 6 / (H100 * WORLD))
    assert a.mem_peak == {s: (10 + s) * 2**30 for s in range(STEPS)}
    assert a.grade_wait == {s: pytest.approx(2.0) for s in range(STEPS)}

    math_g, code_g = (next(g for g in a.graders if g.grader == name) for name in ("math", "code"))
    assert math_g.n == 100 and math_g.cached == 20
    for q in (50, 95, 99):
        assert math_g.percentile(q) == pytest.approx(np.percentile(MATH_MS, q))
    assert (code_g.errors, code_g.timeouts, code_g.verdicts["correct"]) == (STEPS, STEPS, STEPS)
    assert a.verdicts_by_step[3] == {"correct": 15 + 1, "incorrect": 10, "error": 1}
    assert a.status == "ok" and not a.warnings


def _png_sources(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in ("img", "meta", "br"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}> after {self.stack[-3:]}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_is_self_contained_and_shows_the_numbers(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    result = write_report(run)
    assert result.html == run / "report" / "report.html"
    html = result.html.read_text()
    parser = _Tags()
    parser.feed(html)
    assert parser.stack == []
    text = " ".join(parser.text)
    pngs = _png_sources(html)
    assert len(pngs) == len(result.pngs) == 7
    assert all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in result.pngs)
    assert "http" not in re.sub(r"<!doctype[^>]*>", "", html)  # nothing fetched from elsewhere
    assert "4.00 GB moved in 2 s" in text and "median 2 GB/s" in text
    shares = analyze(load_run(run)).stage_shares()
    assert f"{shares['generate']:.3g}" in text
    assert "Warnings" not in text


def test_comm_bytes_by_kind_per_step(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", close=False)
    tw = TraceWriter(run / "trace.jsonl", meta={}, append=True)
    for rank in (0, 1):
        tw.counter("comm_bytes", 1, 3e6, kind="all_gather", rank=rank)
        tw.counter("comm_bytes", 1, 1e6, kind="reduce_scatter", rank=rank)
    tw.counter("comm_bytes", 2, 5e5, kind="handoff", rank=0)
    tw.counter("dispatch_bytes", 2, 7e4, direction="to_workers")
    tw.counter("dispatch_bytes", 2, 9e4, direction="from_workers")
    tw.close()
    a = analyze(load_run(run))
    assert a.comm == {
        1: {"all_gather": 6e6, "reduce_scatter": 2e6},
        2: {"handoff": 5e5, "dispatch_to_workers": 7e4, "dispatch_from_workers": 9e4},
    }
    html = _html_without_figures(a)
    assert "<h2>Communication</h2>" in html and "all_gather" in html and "reduce_scatter" in html
    assert "dispatch_to_workers" in html  # driver <-> worker data of several ranks


def test_truncated_trace_still_reports_with_a_warning(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", close=False)
    trace = run / "trace.jsonl"
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) - 25])  # a torn last record, as a killed writer leaves it
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 4, "reward_m')
    result = write_report(run, tmp_path / "out" / "partial.html")
    assert (tmp_path / "out" / "partial-timeline.png").is_file()
    joined = " ".join(result.warnings)
    assert "no end record" in joined and "unreadable line" in joined and "unreadable metrics line" in joined
    assert result.analysis.status.startswith("running or crashed")
    html = result.html.read_text()
    assert "Warnings" in html and "no end record" in html
    assert len(result.analysis.timings) == STEPS


def test_crashed_status_is_a_warning(tmp_path: Path) -> None:
    run = tmp_path / "run"
    tw = TraceWriter(run / "trace.jsonl", meta={"run": "c"})
    tw.add_span("generate", 0, 1.0, 2.0)
    tw.close("crashed")
    result = write_report(run)
    assert any("crashed" in w for w in result.warnings) and "metrics.jsonl: missing" in " ".join(
        result.warnings
    )


def test_mistyped_records_are_dropped_with_a_warning(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", steps=2)
    with (run / "trace.jsonl").open("a") as fh:
        fh.write(
            json.dumps({"v": 1, "type": "span", "step": "one", "stage": "generate", "start": 0, "end": 1})
            + "\n"
        )
        fh.write(
            json.dumps({"v": 1, "type": "counter", "step": 1, "name": "handoff_bytes", "value": None}) + "\n"
        )
        fh.write(
            json.dumps(
                {"v": 1, "type": "counter", "step": 1, "name": "tokens_generated", "value": 1, "attrs": "x"}
            )
            + "\n"
        )
    a = analyze(load_run(run))
    assert any("2 span/counter record(s)" in w for w in a.warnings)
    assert [h.bytes for h in a.handoff] == [1e9, 1e9]
    assert a.throughput[1].gen_tokens == 5001


def test_cpu_run_says_mfu_na_and_metrics_only_run_uses_time_keys(tmp_path: Path) -> None:
    cpu = make_run(tmp_path / "cpu", meta={"run": "cpu", "device": "cpu", "model": {"params": 1000}})
    a = analyze(load_run(cpu))
    assert all(t.mfu is None for t in a.throughput) and "n/a on CPU" in a.mfu_note
    assert "MFU n/a on CPU" in _html_without_figures(a)


def test_trainer_style_metrics_and_aggregate_latencies(tmp_path: Path) -> None:
    """The trainer's namespaced metric keys, and p50s reported by the grading runtime instead of samples."""
    run = tmp_path / "trainer_style"
    tw = TraceWriter(run / "trace.jsonl", meta={"run": "t", "device": "cpu"})
    tw.counter("grade_latency_ms", 0, 12.0, grader="math", stat="p50")
    tw.counter("grade_latency_ms", 1, 8.0, grader="math", stat="p50")
    for step, (count, hits, timeouts) in enumerate([(4, 1, 0), (8, 3, 2)]):
        tw.counter("grade_count", step, count, grader="math")
        tw.counter("grade_cache_hits", step, hits, grader="math")
        tw.counter("grade_timeouts", step, timeouts, grader="math")
    tw.close()
    rows = [
        {
            "step": 0,
            "handoff/bytes": 3e6,
            "handoff/seconds": 0.5,
            "time/generate_s": 3.0,
            "time/update_s": 1.0,
            "time/step_s": 5.0,
            "reward/mean": 0.25,
            "reward/std": 0.1,
            "policy/kl": 0.0,
            "grading/correct": 3.0,
            "grading/incorrect": 1.0,
            "grading/math/correct": 3.0,
            "grading/math/incorrect": 1.0,
            "grading/masked": 0.0,
        },
        {
            "step": 1,
            "reward/mean": float("nan"),
            "grading/error": 2.0,
            "grading/math/error": 2.0,
            "grading/error_reason/timeout": 2.0,
            "grading/masked": 2.0,
        },
        {"step": 1, "eval/accuracy": 0.5, "eval/prompts": 16.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    a = analyze(load_run(run))
    assert a.verdicts_by_step == {0: {"correct": 3, "incorrect": 1}, 1: {"error": 2}}
    assert [(t.step, t.wall, t.other) for t in a.timings] == [(0, 5.0, 1.0)]  # no spans: metrics' time/*
    assert a.stage_shares() == {"generate": 60.0, "update": 20.0, "other": 20.0}
    (math_g,) = a.graders
    assert math_g.percentile(50) == 8.0 and math.isnan(math_g.percentile(99))
    assert (math_g.n, math_g.cached, math_g.timeouts) == (8, 3, 2)  # the runtime's latest totals
    assert math_g.verdicts == {"correct": 3, "incorrect": 1, "error": 2} and math_g.errors == 2
    html = _html_without_figures(a)
    assert "Masked samples by reason: timeout 2" in html and "last reported by the grading runtime" in html
    assert "reward (first → last)" in html and "0.25 → 0.25" in html  # the NaN row is not a reward
    assert "grading/masked" in html and "eval/prompts" not in html  # last *training* row is tabled

    (run / "trace.jsonl").unlink()
    b = analyze(load_run(run))
    assert b.stage_shares() == a.stage_shares() and any("trace.jsonl: missing" in w for w in b.warnings)
    assert [(h.step, h.gbps) for h in b.handoff] == [(0, pytest.approx(3e6 / 1e9 / 0.5))]  # from metrics


def test_explicit_peak_and_unknown_device(tmp_path: Path) -> None:
    meta = {
        "run": "x",
        "device": "cuda",
        "device_name": "Mystery GPU",
        "model": {"layers": 2, "hidden": 64, "vocab": 100},
    }
    run = make_run(tmp_path / "run", meta=meta)
    a = analyze(load_run(run))
    assert all(t.mfu is None for t in a.throughput) and "unknown device" in a.mfu_note
    b = analyze(load_run(run), peak_tflops=100)
    params = 12 * 2 * 64**2 + 100 * 64
    assert b.throughput[0].mfu == pytest.approx(6 * params * 6000 / 6 / 100e12)


def test_bad_run_dirs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not found"):
        write_report(tmp_path / "nope")
    with pytest.raises(ReportError, match="neither trace.jsonl nor metrics.jsonl"):
        write_report(tmp_path)
    (tmp_path / "trace.jsonl").write_text('{"v": 99, "type": "meta"}\n')
    with pytest.raises(ReportError, match="newer than this reader"):
        write_report(tmp_path)
    out = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert out.exit_code == 2 and "run directory not found" in out.output


def test_cli_writes_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    TraceWriter(run / "trace.jsonl", meta={"run": "cli"}).add_span("generate", 0, 1.0, 2.0)  # never closed
    out = CliRunner().invoke(app, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    assert "warning:" in out.output and "no end record" in out.output
    assert (tmp_path / "r.html").is_file() and (tmp_path / "r-timeline.png").is_file()


@pytest.mark.slow
def test_report_of_a_real_cpu_training_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """`rrl train` (tiny model, HF rollout engine, 3 steps) writes the run dir; the report agrees with it."""
    import subprocess
    import sys

    import yaml

    from reasoning_rl.trace import read_trace

    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "run": {"name": "real", "dir": str(tmp_path / "runs" / "{name}"), "device": "cpu"},
                "model": {"path": str(tiny_model_dir)},
                "data": {"train": {"generator": "fixed_digit", "size": 16}},
                "rollout": {"engine": "hf", "n": 2, "max_tokens": 8},
                "trainer": {"steps": 3, "batch_size": 2, "export": False},
                "grading": {"workers": 1},
                "logging": {"console": "plain", "tensorboard": False},
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "train", str(config)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = tmp_path / "runs" / "real"

    result = write_report(run)
    a = result.analysis
    trace = read_trace(run / "trace.jsonl")
    assert a.status == "ok" and not result.warnings and len(result.pngs) >= 5
    assert [t.step for t in a.timings] == [1, 2, 3]
    assert sum(a.stage_shares().values()) == pytest.approx(100.0)
    metrics = {row["step"]: row for row in a.metrics}
    for t in a.timings:  # the trainer's own per-step stage times come from the same spans
        assert {"generate", "grade_wait", "update", "handoff"} <= set(t.stages)
        for stage, seconds in t.stages.items():
            if stage != "checkpoint":  # saved after the step's metrics line is written
                assert metrics[t.step][f"time/{stage}_s"] == pytest.approx(seconds, rel=1e-6, abs=1e-6)
    spans = {(s["step"], s["stage"]): s["end"] - s["start"] for s in trace.spans}
    for h in a.handoff:
        assert h.bytes == metrics[h.step]["handoff/bytes"] > 0
        assert (
            a.comm[h.step]["handoff"] == h.bytes
        )  # the trainer's comm_bytes counters (no FSDP: hand-off only)
        assert h.gbps == pytest.approx(h.bytes / 1e9 / spans[(h.step, "handoff")])
    gen = {c["step"]: c["value"] for c in trace.counters if c["name"] == "tokens_generated"}
    for tp in a.throughput:
        assert tp.gen_tps == pytest.approx(gen[tp.step] / spans[(tp.step, "generate")])
        assert tp.mfu is None
    assert "n/a on CPU" in a.mfu_note
    for step, verdicts in a.verdicts_by_step.items():
        assert sum(verdicts.values()) == metrics[step]["samples"]
    assert result.html.read_text().count("data:image/png;base64,") == len(result.pngs)
    # the per-engine-step cost curve (issue 44): every step's engine steps, the tokens they sampled, pooled
    assert a.staleness is not None and a.staleness.step_cost == pooled(trace.counters)
    for step in (1, 2, 3):
        curve = [c for c in trace.counters if c["name"] == COUNTER and c["step"] == step]
        assert sum(c["value"] for c in curve) == metrics[step]["rollout/engine_steps"] > 0
        assert sum(c["attrs"]["tokens"] for c in curve) == gen[step] > 0
        assert metrics[step]["rollout/engine_step_ms"] > 0
    assert "Engine step cost by running batch" in result.html.read_text()

    data = (run / "trace.jsonl").read_bytes()
    (run / "trace.jsonl").write_bytes(data[: len(data) * 2 // 3])  # as if killed mid-run
    partial = write_report(run, tmp_path / "partial.html")
    assert any("no end record" in w for w in partial.warnings)
    assert 1 <= len(partial.analysis.timings) <= 3 and "no end record" in partial.html.read_text()


def _laid_out(name: str, a: Analysis):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from reasoning_rl.report.plots import BUILDERS, layout

    fig = BUILDERS[name](a)
    assert fig is not None
    FigureCanvasAgg(fig)
    layout(fig)
    return fig, fig.canvas.get_renderer()


def test_every_axis_is_labelled(tmp_path: Path) -> None:
    """Before: the curve panels and the stage-share bars had no y label."""
    a = analyze(load_run(make_run(tmp_path / "run")))
    for name in ("timeline", "stage_share", "handoff", "throughput", "memory", "grading", "curves"):
        fig, _ = _laid_out(name, a)
        for ax in fig.axes:
            twins = [o for o in ax.get_shared_x_axes().get_siblings(ax) if o is not ax]
            assert ax.get_ylabel(), (name, ax.get_title())
            assert ax.get_xlabel() or any(o.get_xlabel() for o in twins), (name, ax.get_title())


def test_verdict_legend_does_not_cover_the_bars(tmp_path: Path) -> None:
    """Before: the legend sat inside the verdict-mix axes, whose stacked bars fill it to 1."""
    from matplotlib.patches import Rectangle

    fig, renderer = _laid_out("grading", analyze(load_run(make_run(tmp_path / "run"))))
    ax = next(ax for ax in fig.axes if ax.get_title() == "Verdict mix")
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_height() > 0]
    assert bars and not any(legend.overlaps(p.get_window_extent(renderer)) for p in bars)


def test_reward_band_stays_within_the_reward_range(tmp_path: Path) -> None:
    """Before: mean +- std was drawn past [0, 1] (std 0.1 around means 0 and 0.6)."""
    fig, _ = _laid_out("curves", analyze(load_run(make_run(tmp_path / "run"))))
    ax = next(ax for ax in fig.axes if ax.get_title() == "reward")
    (band,) = ax.collections
    ys = np.concatenate([path.vertices[:, 1] for path in band.get_paths()])
    assert ys.min() >= 0.0 and ys.max() <= 1.0
    assert ys.max() == pytest.approx(0.7)  # 0.6 + 0.1 is inside [0, 1]: not clipped


def test_lora_run_shows_trainable_params_and_adapter_norm(tmp_path: Path) -> None:
    meta = {
        "run": "lora",
        "device": "cpu",
        "world_size": 1,
        "model": {"params": 1_000_000, "trainable": 20_000, "lora_rank": 8, "dtype": "float32"},
    }
    run = make_run(tmp_path / "run", meta=meta)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for i, row in enumerate(rows):
        row["policy/adapter_norm"] = 0.5 * (i + 1)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = _html_without_figures(analyze(load_run(run)))
    assert "trainable params</th><td>20,000 (LoRA r=8: 2 % of the base)" in html
    assert f"adapter update norm (first → last)</th><td>0.5 → {0.5 * len(rows):.3g}" in html
    full = _html_without_figures(analyze(load_run(make_run(tmp_path / "full"))))
    assert "adapter update norm" not in full


def test_mfu_counts_only_the_tokens_the_update_computed(tmp_path: Path) -> None:
    """A step whose zero-advantage rows were skipped: MFU over the computed tokens, never over the whole batch
    (the H200 re-run reported MFU 1.6 that way: 95 % of the rows skipped, all of them counted)."""
    root = tmp_path / "run"
    meta = {"run": "s", "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "model": {"params": PARAMS}}
    tw = TraceWriter(root / "trace.jsonl", meta=meta)
    tw.add_span("update", 1, 100.0, 100.01)  # 10 ms for a batch of 1M tokens: MFU ~600 if all were counted
    tw.counter("tokens_trained", 1, 1_000_000)
    tw.counter("tokens_computed", 1, 500)
    tw.close()
    (root / "metrics.jsonl").write_text("")
    (t,) = analyze(load_run(root)).throughput
    assert t.computed_tokens == 500 and t.train_tokens == 1_000_000
    assert t.mfu == pytest.approx(6 * PARAMS * 500 / 0.01 / H100, rel=1e-3)
    assert t.mfu < 1


def test_engine_step_cost_curve_in_the_staleness_section(tmp_path: Path) -> None:
    """The trace's ``engine_steps`` counters (``reasoning_rl/step_cost``) become the report's table: per
    running-batch bucket, engine steps, ms per step, µs per request-step, the share inside ``advance``."""
    root = make_run(tmp_path / "run", close=False)
    tw = TraceWriter(root / "trace.jsonl", append=True)
    cost = StepCost(target=64)
    for _ in range(3):
        cost.add(64, 0.02, 0.015, 64)
    cost.add(10, 0.005, 0.0025, 10)
    cost.flush(tw, 1)
    cost.add(70, 0.02, 0.015, 70)
    cost.flush(tw, 2)
    tw.close()
    a = analyze(load_run(root))
    assert a.staleness is not None
    assert [(b.lo, b.hi, b.steps, b.requests) for b in a.staleness.step_cost] == [
        (0, 32, 1, 10),
        (64, None, 4, 262),
    ]
    html = _html_without_figures(a)
    assert "<td>0-31</td><td>1</td><td>5.00</td><td>500.0</td><td>50</td><td>2,000</td>" in html
    assert "<td>&gt;= 64</td><td>4</td><td>20.00</td><td>305.3</td><td>75</td><td>3,275</td>" in html
