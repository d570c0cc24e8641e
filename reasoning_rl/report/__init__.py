"""``rrl report RUN_DIR``: where a run's time, bytes and rewards went, as one self-contained HTML page + PNGs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reasoning_rl.report.analysis import Analysis, analyze
from reasoning_rl.report.load import ReportError, RunData, load_run

__all__ = ["Analysis", "ReportError", "ReportResult", "RunData", "analyze", "load_run", "write_report"]


@dataclass(frozen=True)
class ReportResult:
    html: Path
    pngs: list[Path]
    warnings: list[str]
    analysis: Analysis


def write_report(
    run_dir: str | Path, out: str | Path | None = None, *, peak_tflops: float | None = None
) -> ReportResult:
    """Write ``out`` (default ``RUN_DIR/report/report.html``) and ``<stem>-<figure>.png`` beside it."""
    from reasoning_rl.report.html import render_html
    from reasoning_rl.report.plots import FIGURES
    from reasoning_rl.report.samples import samples_section

    run = load_run(run_dir)
    analysis = analyze(run, peak_tflops=peak_tflops)
    html_path = Path(out) if out else run.run_dir / "report" / "report.html"
    html_path.parent.mkdir(parents=True, exist_ok=True)
    figs = {name: make(analysis) for name, make in FIGURES.items()}
    pngs = []
    for name, png in figs.items():
        if png is not None:
            path = html_path.with_name(f"{html_path.stem}-{name}.png")
            path.write_bytes(png)
            pngs.append(path)
    run_name = str(analysis.meta.get("run") or run.run_dir.resolve().name)
    tmp = html_path.with_name(html_path.name + ".tmp")
    page = render_html(
        analysis, figs, run_name=run_name, config=run.config, samples=samples_section(run.run_dir)
    )
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(html_path)
    return ReportResult(html_path, pngs, analysis.warnings, analysis)
