"""Orchestrate one ``rrl grade`` run: stream rows into a GradingPool, write each row when its grades are in.

Resumable by construction: OUTPUT is append-only with one flushed line per finished row (sorted into input
order once the run completes, also after a resume), rows already in it
are skipped (when the run record shows they came from the same input, graders and options: fingerprint.py),
and the grade cache (next to OUTPUT by default) replays grades of rows cut off by Ctrl-C. Run-wide mistakes
stop the run before any row is written (preflight.py); anything that goes wrong with one row becomes that
row's error line.
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

from graders.evaluation.fingerprint import RunRecord, grader_identity, input_fingerprint
from graders.evaluation.inputs import BadRow, InputError, count_rows, read_rows
from graders.evaluation.options import GraderOptions
from graders.evaluation.output import done_rows, sort_output, write_line
from graders.evaluation.preflight import preflight
from graders.evaluation.rows import Router, RowJob, RowProblem, error_line, parse_row, result_line
from graders.gsm8k_rows import gsm8k_note
from graders.runtime import GradeRequest, GradingPool
from graders.types import Grade


@dataclass
class GradeRunConfig:
    input: Path
    output: Path
    router: Router
    options: GraderOptions = field(default_factory=GraderOptions)
    workers: int = 2
    backend: str = "auto"
    ray_address: str | None = None
    timeout_s: float = 10.0
    retries: int = 1
    cache_path: Path | None = None
    max_in_flight: int = 256
    split: str | None = None
    show_progress: bool = True
    overwrite: bool = False  # start OUTPUT afresh instead of resuming into it
    limit: int | None = None  # grade only the first N rows of each data_source


@dataclass
class GradeRunResult:
    rows_written: int
    rows_skipped: int
    responses_graded: int
    seconds: float
    interrupted: bool
    pool_metrics: dict[str, Any]
    checks_graded: int = 0  # maj@k equivalence judgements (grades that are not responses)
    rows_over_limit: int = 0  # rows past --limit for their data_source: left out


class _RateColumn(ProgressColumn):
    """Responses per second (rows are the progress unit; responses are what costs time)."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.fields.get("responses", 0) / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} responses/s", style="progress.data.speed")


def _start_record(cfg: GradeRunConfig) -> tuple[RunRecord, set[int]]:
    """Check the run-wide setup, then OUTPUT: start it afresh, or resume into it when its record matches."""
    loaded = preflight(cfg.router, cfg.options, cfg.input, cfg.split)
    record = RunRecord(
        cfg.output,
        {
            "input": input_fingerprint(cfg.input, cfg.split),
            "routing": {"default": cfg.router.default, "by_source": cfg.router.by_source},
            "options": cfg.options.common,  # not --limit: a row's result does not depend on it, so it may grow
            # only when given, so the records of runs without per-grader options stay the same
            **({"grader_options": cfg.options.scoped} if cfg.options.scoped else {}),
        },
    )
    if cfg.overwrite:
        cfg.output.unlink(missing_ok=True)
    done = done_rows(cfg.output)
    if done:
        record.check_resume(cfg.output, len(done))
    for spec, grader in loaded.items():
        record.data["graders"].setdefault(spec, grader_identity(grader))
    cfg.output.parent.mkdir(parents=True, exist_ok=True)
    record.save()
    cfg.router.on_load = record.use
    return record, done


def run_grading(cfg: GradeRunConfig) -> GradeRunResult:
    total = count_rows(cfg.input, cfg.split)
    if total == 0:
        raise InputError(f"{cfg.input} has no rows: nothing to grade")
    all_rows = total
    if cfg.limit is not None:
        total = sum(1 for _ in _within_limit(read_rows(cfg.input, cfg.split), cfg.limit))
    _, done = _start_record(cfg)
    start = time.monotonic()
    written = graded = checked = 0
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
        with progress, cfg.output.open("ab") as out:
            bar = progress.add_task("grade", total=total, completed=len(done), responses=0)

            def write(line: dict[str, Any]) -> None:
                nonlocal written
                write_line(out, line)
                written += 1
                progress.update(bar, advance=1, responses=graded)

            def advance(job: RowJob) -> None:
                """Once its grades are in, a row asks for its equivalence checks; once those are in, it is written."""
                if not job.done:
                    return
                if job.checks or not job.plan_checks() or not _submit(pool, job, cfg, "check"):
                    del pending[job.number]
                    write(_finished_line(job, cfg.router))

            def finish(req: GradeRequest, grade: Grade) -> None:
                nonlocal graded, checked
                number, kind, index = req.id
                job = pending[number]
                if kind == "grade":
                    job.grades[index] = grade
                    graded += 1
                else:
                    job.check_grades[index] = grade
                    checked += 1
                advance(job)

            told_gsm8k = False
            try:
                for number, row in _todo(cfg, done):
                    job = _new_job(number, row, cfg)
                    if isinstance(job, RowJob) and job.gold_from_gsm8k and not told_gsm8k:
                        told_gsm8k = True  # once per run: the rows themselves say nothing
                        progress.console.print(
                            gsm8k_note(f"{cfg.input.name}: row {number} (and every row like it) is"),
                            markup=False,
                            highlight=False,
                        )
                    if isinstance(job, dict):
                        write(job)
                    else:
                        pending[number] = job
                        _submit(pool, job, cfg, "grade")
                        advance(job)
                    for req, grade in pool.poll(0):
                        finish(req, grade)
                for req, grade in pool.results():
                    finish(req, grade)
            except KeyboardInterrupt:
                interrupted = True
        if not interrupted:
            sort_output(cfg.output)  # rows finish out of order; a finished OUTPUT is in input order
    finally:
        metrics = pool.metrics()
        pool.close()
    return GradeRunResult(
        written, len(done), graded, time.monotonic() - start, interrupted, metrics, checked, all_rows - total
    )


Numbered = Iterator[tuple[int, dict[str, Any] | BadRow]]


def _within_limit(rows: Numbered, limit: int | None) -> Numbered:
    """The first ``limit`` rows of each data_source, in input order (a row without one counts as its own
    source ``None``); rows already graded count too, so a resume picks the same rows."""
    seen: dict[str, int] = {}
    for number, row in rows:
        source = None if isinstance(row, BadRow) else row.get("data_source")
        key = source if isinstance(source, str) else repr(source)
        seen[key] = seen.get(key, 0) + 1
        if limit is None or seen[key] <= limit:
            yield number, row


def _todo(cfg: GradeRunConfig, done: set[int]) -> Numbered:
    for number, row in _within_limit(read_rows(cfg.input, cfg.split), cfg.limit):
        if number not in done:
            yield number, row


def _new_job(number: int, row: dict[str, Any] | BadRow, cfg: GradeRunConfig) -> RowJob | dict[str, Any]:
    """The row's job, or the error line to write when the row cannot be graded."""
    if isinstance(row, BadRow):
        return error_line(number, row, row.reason)
    try:
        return parse_row(number, row, cfg.router)
    except RowProblem as exc:
        return error_line(number, row, str(exc))
    except OSError:
        raise  # the run record could not be written: the machine's problem, not the row's
    except Exception as exc:  # anything else about this row's content costs this row only
        return error_line(number, row, f"internal error: {type(exc).__name__}: {exc}")


def _submit(pool: GradingPool, job: RowJob, cfg: GradeRunConfig, kind: str) -> bool:
    """Submit a row's responses (``grade``) or its equivalence checks (``check``); False if nothing went out.

    A request the pool cannot take (its content cannot be hashed or pickled) gets an error grade, with the rest
    of its kind in this row, so the row still completes; a broken pool (RuntimeError) ends the run.
    """
    if kind == "grade":
        work = [(job.responses[i], job.ground_truth) for i in range(len(job.responses))]
        slots = job.grades
    else:
        work = [(job.responses[i], answer) for i, answer in job.checks]
        slots = job.check_grades
    options = cfg.options.for_grader(job.spec, cfg.router.identity(job.spec)[0])
    for index, (response, truth) in enumerate(work):
        try:
            request = GradeRequest(
                job.spec, response, truth, options, id=(job.number, kind, index), context=job.context
            )
            pool.submit(request)
        except RuntimeError:
            raise
        except Exception as exc:  # this row's content, not the pool: the row's error, never the run's
            for rest in range(index, len(work)):
                slots[rest] = Grade.error(f"internal_error: cannot submit: {type(exc).__name__}: {exc}")
            return index > 0
    return bool(work)


def _finished_line(job: RowJob, router: Router) -> dict[str, Any]:
    try:
        return result_line(job, router)
    except Exception as exc:  # a scoring bug or an odd grade costs this row, never the run
        return error_line(job.number, job.row, f"internal error while scoring: {type(exc).__name__}: {exc}")
