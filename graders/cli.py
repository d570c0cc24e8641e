"""``rrl grade`` and ``rrl graders list``. Only typer is imported here; the work is imported per command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

graders_app = typer.Typer(help="Installed graders (built-ins and plugins).", no_args_is_help=True)


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=flag)
        out[key] = value
    return out


def grade_command(
    input: Path = typer.Argument(None, help="JSONL, parquet, or a saved Hugging Face dataset directory."),
    output: Path = typer.Option(
        None,
        "-o",
        "--output",
        help="Results JSONL (appended; re-running the same command resumes; see --overwrite).",
    ),
    grader: str = typer.Option(
        None,
        "--grader",
        help="Grader for rows without a `grader` field: a name from "
        "`rrl graders list`, or module:Class (a Grader class or instance in a .py file "
        "of the working directory or on PYTHONPATH; no packaging needed).",
    ),
    source_grader: list[str] = typer.Option(
        [], "--source-grader", help="SOURCE=GRADER: route a data_source."
    ),
    option: list[str] = typer.Option(
        [],
        "--option",
        help="KEY=VALUE grader option for every grader of the run, or GRADER.KEY=VALUE for one grader "
        "(e.g. math.mode=lenient: rows routed by data_source to gsm8k then keep their defaults); JSON values; "
        "checked against every grader the rows route to before grading. Repeatable.",
    ),
    mode: str = typer.Option(
        None, "--mode", help="Shorthand for --option mode=VALUE (every grader; math.mode=VALUE for one)."
    ),
    workers: int = typer.Option(2, "--workers", min=1, help="Grading workers (processes or Ray actors)."),
    ray_address: str = typer.Option(
        None, "--ray-address", help="Grade on this Ray cluster ('auto' = local)."
    ),
    backend: str = typer.Option("auto", "--backend", help="auto | process | ray."),
    timeout: float = typer.Option(10.0, "--timeout", min=0.001, help="Hard per-response budget in seconds."),
    retries: int = typer.Option(1, "--retries", min=0, help="Re-runs of a response whose worker died."),
    cache: Path = typer.Option(None, "--cache", help="Grade cache (SQLite; default: OUTPUT.cache.sqlite)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the grade cache."),
    report: Path = typer.Option(None, "--report", help="Also write an HTML report with plots."),
    split: str = typer.Option(None, "--split", help="Split of a HF DatasetDict directory."),
    limit: int = typer.Option(
        None,
        "--limit",
        min=1,
        help="Grade only the first N rows of each data_source (the rest are left out of OUTPUT and counted).",
    ),
    summary_json: Path = typer.Option(None, "--summary-json", help="Also write the summary as JSON."),
    progress: bool = typer.Option(
        None,
        "--progress/--no-progress",
        help="Show the progress bar (default: when stderr is a terminal; a log file gets none).",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Start OUTPUT afresh instead of resuming into it (the cache is kept)."
    ),
    fail_on_errors: bool = typer.Option(
        False,
        "--fail-on-errors",
        help="Exit 1 when any response or row is an error (default: only when all are).",
    ),
    regrade: Path = typer.Option(
        None,
        "--regrade",
        help="Re-grade stored `rrl grade` results with the installed "
        "graders and list every flipped verdict per grader version pair (no INPUT/-o). A module:Class "
        "grader the results name loads only when given again with --grader.",
    ),
) -> None:
    """Grade responses in INPUT (no model needed): mean score, pass@k, maj@k per data_source.

    \b
    Input columns (one row per prompt; JSONL, parquet or a saved HF dataset):
      response | responses   the answer text, or a list of k samples (pass@k, maj@k)
      ground_truth           the gold answer (or verl's reward_model.ground_truth)
      grader                 optional: a registered grader name for this row
      data_source            optional: routes the row (--source-grader, verl's names)
      prompt, extra_info     optional: context for graders that declare it
    Other columns are carried into OUTPUT. Per row OUTPUT gets score (mean over the
    k samples), verdict, pass, maj, grades; the summary's mean_score is the mean of
    score, pass@1 the share of correct samples.

    Results go to OUTPUT, the summary to stdout, progress and messages to stderr. Exit codes: 0 done, 1 every
    row an error (or any, with --fail-on-errors), 2 a mistake in the command or input, 130 interrupted.
    """
    from graders.evaluation.display import print_summary
    from graders.evaluation.inputs import InputError
    from graders.evaluation.options import GraderOptions, OptionError
    from graders.evaluation.output import OutputError
    from graders.evaluation.preflight import RunError
    from graders.evaluation.rows import Router
    from graders.evaluation.run import GradeRunConfig, run_grading
    from graders.evaluation.streams import results_console, stdout_to_stderr
    from graders.evaluation.summary import summarize
    from graders.runtime import importable_from_cwd

    console = results_console(stderr=True)
    if backend not in ("auto", "process", "ray"):
        raise typer.BadParameter("must be auto, process or ray", param_hint="--backend")
    try:
        options = GraderOptions.parse(option, mode)
    except OptionError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    by_source = _pairs(source_grader, "--source-grader")
    importable_from_cwd([grader or "", *by_source.values()])
    if regrade is not None:
        if options.scoped:
            raise typer.BadParameter("--regrade takes options for every grader only (KEY=VALUE)")
        from graders.evaluation.regrade import regrade_command

        raise typer.Exit(
            regrade_command(
                regrade,
                report_path=report,
                options=options.common,
                allowed=frozenset(spec for spec in [grader, *by_source.values()] if spec and ":" in spec),
                workers=workers,
                timeout_s=timeout,
                backend=backend,
                ray_address=ray_address,
            )
        )
    if input is None or output is None:
        raise typer.BadParameter("INPUT and -o/--output are required (unless --regrade OLD.jsonl)")
    cfg = GradeRunConfig(
        input=input,
        output=output,
        router=Router(default=grader, by_source=by_source),
        options=options,
        workers=workers,
        backend=backend,
        ray_address=ray_address,
        timeout_s=timeout,
        retries=retries,
        cache_path=None if no_cache else (cache or output.with_name(output.name + ".cache.sqlite")),
        split=split,
        show_progress=sys.stderr.isatty() if progress is None else progress,
        overwrite=overwrite,
        limit=limit,
    )
    try:
        with stdout_to_stderr():  # graders print; stdout carries the summary only
            result = run_grading(cfg)
    except (InputError, OutputError, RunError, OSError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    summary = summarize(output) if output.exists() else {"overall": {}, "by_source": {}}
    run = {
        "rows_written": result.rows_written,
        "rows_skipped": result.rows_skipped,
        "rows_over_limit": result.rows_over_limit,
        "responses_graded": result.responses_graded,
        "equivalence_checks": result.checks_graded,
        "seconds": result.seconds,
        "interrupted": result.interrupted,
        "pool": result.pool_metrics,
    }
    if summary["overall"]:
        print_summary(results_console(), summary, run)
    replayed = sum(g["cache_hits"] for g in result.pool_metrics.get("graders", {}).values())
    if replayed:
        console.print(
            f"[bold yellow]{replayed} grades replayed from cache {cfg.cache_path}[/bold yellow] "
            "(graded earlier by the same grader name, version and source; --no-cache to regrade)"
        )
    if summary_json is not None:
        summary_json.write_text(json.dumps({"summary": summary, "run": run}, indent=2, default=repr) + "\n")
    if report is not None and summary["overall"]:
        from graders.evaluation.report import write_report

        write_report(report, summary, run, title=f"rrl grade: {input.name}")
        console.print(f"report: {report}")
    if result.interrupted:
        console.print(
            f"[yellow]interrupted[/yellow]: finished rows are in {output}; re-run the same command to resume."
        )
        raise typer.Exit(130)
    verdicts, rows = summary["overall"].get("verdicts", {}), summary["overall"].get("rows", 0)
    errors = verdicts.get("error", 0) + summary["overall"].get("malformed_rows", 0)
    if rows and not verdicts.get("correct", 0) + verdicts.get("incorrect", 0):
        typer.secho(f"error: every row in {output} is an error (see the `reason` fields)", fg="red", err=True)
        raise typer.Exit(1)
    if fail_on_errors and errors:
        typer.secho(f"error: {errors} errors in {output} (--fail-on-errors)", fg="red", err=True)
        raise typer.Exit(1)


@graders_app.command("selftest")
def selftest_command(
    name: list[str] = typer.Argument(None, help="Graders to test (default: every installed grader)."),
    workers: int = typer.Option(2, "--workers", min=1, help="Grading workers."),
    timeout: float = typer.Option(30.0, "--timeout", min=0.001, help="Hard per-case budget in seconds."),
) -> None:
    """Grade each grader's own golden cases; exit 1 listing every disagreement."""
    from graders.selftest import selftest_command as run

    raise typer.Exit(run(list(name or []), workers=workers, timeout_s=timeout))


@graders_app.command("list")
def list_command(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show every grader that can be used by name, with its version and where it comes from."""
    from graders.evaluation.streams import print_listing
    from graders.listing import installed_graders

    infos = installed_graders()
    rows = infos if as_json else [{**info, "version": info["version"] or "-"} for info in infos]
    columns = ("name", "version", "provider", "target", "status")
    print_listing(rows, "graders (entry point group reasoning_rl.graders)", columns, as_json)
