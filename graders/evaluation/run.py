"""Orchestrate one ``rrl grade`` run: stream rows into a GradingPool, write each row when its grades are in.

Resumable by construction: OUTPUT is append-only with one flushed line per finished row, rows already in it
are skipped, and the grade cache (next to OUTPUT by default) replays grades of rows cut off by Ctrl-C.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from graders.evaluation.inputs import BadRow, count_rows, read_rows
from graders.evaluation.output import done_rows, write_line
from graders.evaluation.rows import Router, RowJob, RowProblem, error_line, parse_row, result_line
from graders.runtime import GradeRequest, GradingPool
from graders.types import Grade


@dataclass
class GradeRunConfig:
    input: Path
    output: Path
    router: Router
    options: dict[str, Any] = field(default_factory=dict)
    workers: int = 2
    backend: str = "auto"
    ray_address: str | None = None
    timeout_s: float = 10.0
    retries: int = 1
    cache_path: Path | None = None
    max_in_flight: int = 256
    split: str | None = None
    show_progress: bool = True


@dataclass
class GradeRunResult:
    rows_written: int
    rows_skipped: int
    responses_graded: int
    seconds: float
    interrupted: bool
    pool_metrics: dict[str, Any]


class _RateColumn(ProgressColumn):
    """Responses per second (rows are the progress unit; responses are what costs time)."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.fields.get("responses", 0) / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} responses/s", style="progress.data.speed")


def run_grading(cfg: GradeRunConfig) -> GradeRunResult:
    done = done_rows(cfg.output)
    total = count_rows(cfg.input, cfg.split)
    start = time.monotonic()
    written = graded = 0
    interrupted = False
    pending: dict[int, RowJob] = {}
    progress = Progress(
        TextColumn("grading"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows"),
        _RateColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not cfg.show_progress,
    )
    pool = GradingPool(
        workers=cfg.workers,
        backend=cfg.backend,  # type: ignore[arg-type]
        ray_address=cfg.ray_address,
        timeout_s=cfg.timeout_s,
        retries=cfg.retries,
        cache_path=cfg.cache_path,
        max_in_flight=cfg.max_in_flight,
    )
    try:
        with progress, cfg.output.open("a", encoding="utf-8") as out:
            bar = progress.add_task("grade", total=total, completed=len(done), responses=0)

            def finish(req: GradeRequest, grade: Grade) -> None:
                nonlocal written, graded
                number, index = req.id
                job = pending[number]
                job.grades[index] = grade
                graded += 1
                if job.done:
                    write_line(out, result_line(job, cfg.router))
                    del pending[number]
                    written += 1
                    progress.update(bar, advance=1, responses=graded)

            try:
                for number, row in _todo(cfg, done):
                    line = _submit_row(pool, number, row, cfg, pending)
                    if line is not None:
                        write_line(out, line)
                        written += 1
                        progress.update(bar, advance=1)
                    for req, grade in pool.poll(0):
                        finish(req, grade)
                for req, grade in pool.results():
                    finish(req, grade)
            except KeyboardInterrupt:
                interrupted = True
    finally:
        metrics = pool.metrics()
        pool.close()
    return GradeRunResult(written, len(done), graded, time.monotonic() - start, interrupted, metrics)


def _todo(cfg: GradeRunConfig, done: set[int]) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
    for number, row in read_rows(cfg.input, cfg.split):
        if number not in done:
            yield number, row


def _submit_row(
    pool: GradingPool,
    number: int,
    row: dict[str, Any] | BadRow,
    cfg: GradeRunConfig,
    pending: dict[int, RowJob],
) -> dict[str, Any] | None:
    """Submit a row's responses; returns the error line instead when the row cannot be graded."""
    if isinstance(row, BadRow):
        return error_line(number, row, row.reason)
    try:
        job = parse_row(number, row, cfg.router)
    except RowProblem as exc:
        return error_line(number, row, str(exc))
    pending[number] = job
    for index, response in enumerate(job.responses):
        pool.submit(GradeRequest(job.spec, response, job.ground_truth, cfg.options, id=(number, index)))
    return None
