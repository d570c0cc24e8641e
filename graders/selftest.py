"""Grader golden cases: a small labelled set each grader ships, re-judged before the grader is trusted.

A grader finds its cases in one of two places (first that applies):

- a method ``golden_cases()`` returning dicts (or ``GoldenCase``) - for plugins that build them in code;
- a JSONL package resource next to the grader's module: ``selftest_file`` (class attribute, a file name
  in the grader's package), by default ``selftest.jsonl``. Built-ins: graders/math|code|lean/selftest.jsonl.

A grader that needs something the machine may lack (Lean: a toolchain the user brings) may define
``unavailable(setup) -> str | None``: why it cannot run here, or None. Its cases are then skipped with that reason
instead of failing as errors: a check of every grader passes on a machine without Lean, one that names the
grader fails with the reason. ``setup_options`` (a class attribute) names the options that say where the
grader runs rather than how it judges (Lean: the toolchain, the sandbox); a run's selftest grades the cases
with the run's values of those, so the cases run where the run's rows will.

Each line: ``{"response": ..., "ground_truth": ..., "verdict": "correct"|"incorrect"|"error",
"options": {...}, "context": {...}, "note": "..."}``; ``context`` (for graders declaring ``context_fields``)
takes ``prompt`` (text or chat messages), ``data_source``, ``extra_info`` and ``row_id``. A case passes when the grade's verdict equals ``verdict``. Cases are
graded through the runtime (``GradingPool``: workers, hard budget), the same path training uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from graders.runtime import GradeRequest, GradingPool, resolve_grader
from graders.types import VERDICTS, Grade, GradeContext, Grader
from graders.untrusted_json import UntrustedJSONError, loads_untrusted

DEFAULT_FILE = "selftest.jsonl"


class SelftestError(RuntimeError):
    """A grader disagrees with its own golden cases (or they cannot be read); the message lists each one."""


@dataclass(frozen=True)
class GoldenCase:
    response: str
    ground_truth: Any
    verdict: str
    options: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    context: GradeContext | None = None

    @classmethod
    def parse(cls, data: Any, where: str) -> GoldenCase:
        if not isinstance(data, dict):
            raise SelftestError(f"{where}: a golden case must be an object, got {type(data).__name__}")
        missing = [k for k in ("response", "ground_truth", "verdict") if k not in data]
        if missing:
            raise SelftestError(f"{where}: golden case lacks {', '.join(missing)}")
        if data["verdict"] not in VERDICTS:
            raise SelftestError(
                f"{where}: verdict must be one of {', '.join(VERDICTS)}, got {data['verdict']!r}"
            )
        if not isinstance(data["response"], str):
            raise SelftestError(f"{where}: field `response` must be a string")
        options = data.get("options") or {}
        if not isinstance(options, dict):
            raise SelftestError(f"{where}: field `options` must be an object")
        return cls(
            data["response"],
            data["ground_truth"],
            data["verdict"],
            options,
            str(data.get("note", "")),
            _case_context(data.get("context"), where),
        )


def _case_context(data: Any, where: str) -> GradeContext | None:
    if data is None:
        return None
    unknown = (
        sorted(set(data) - {"prompt", "data_source", "extra_info", "row_id"})
        if isinstance(data, dict)
        else []
    )
    if not isinstance(data, dict) or unknown:
        raise SelftestError(
            f"{where}: field `context` must be an object of prompt, data_source, extra_info, row_id"
            + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )
    return GradeContext.from_messages(
        data.get("prompt"),
        data_source=data.get("data_source"),
        extra_info=data.get("extra_info"),
        row_id=data.get("row_id", where),
    )


@dataclass
class Disagreement:
    """Golden case ``index`` (1-based) and the grade it got instead."""

    index: int
    case: GoldenCase
    grade: Grade

    def describe(self) -> str:
        note = f" ({self.case.note})" if self.case.note else ""
        return (
            f"case {self.index}{note}: expected {self.case.verdict}, got {self.grade.verdict}"
            f"{': ' + self.grade.reason if self.grade.reason else ''}"
        )


@dataclass
class SelftestResult:
    """One grader's run: its identity, where the cases came from, how many, and each disagreement."""

    spec: str
    name: str
    version: str
    source: str
    cases: int
    disagreements: list[Disagreement] = field(default_factory=list)
    skipped: str | None = None  # why the cases did not run (the grader's ``unavailable()``)

    @property
    def ok(self) -> bool:
        return not self.disagreements


def golden_cases(grader: Grader) -> tuple[list[GoldenCase], str]:
    """The grader's cases and where they came from ("" and no cases when it ships none)."""
    method = getattr(grader, "golden_cases", None)
    if callable(method):
        where = f"{type(grader).__name__}.golden_cases()"
        return [
            c if isinstance(c, GoldenCase) else GoldenCase.parse(c, f"{where} item {i}")
            for i, c in enumerate(method())
        ], where
    file_name = str(getattr(grader, "selftest_file", DEFAULT_FILE))
    package = type(grader).__module__.rpartition(".")[0] or type(grader).__module__
    try:
        resource = resources.files(package).joinpath(file_name)
    except (ModuleNotFoundError, TypeError):
        return [], ""
    if not resource.is_file():
        if hasattr(grader, "selftest_file"):
            raise SelftestError(
                f"grader {grader.name!r}: selftest_file {file_name!r} not found in package {package}"
            )
        return [], ""
    where = f"{package}/{file_name}"
    cases = []
    for n, line in enumerate(_case_lines(resource, where), start=1):
        if not line.strip():
            continue
        try:
            data = loads_untrusted(line)
        except UntrustedJSONError as exc:  # not JSON, nested too deep, an over-long integer
            raise SelftestError(f"{where} line {n} {exc}") from None
        cases.append(GoldenCase.parse(data, f"{where} line {n}"))
    return cases, where


def _case_lines(resource: Traversable, where: str) -> list[str]:
    """The lines of a golden-case file; ``SelftestError`` naming the file (and line) when it cannot be read
    or is not UTF-8."""
    try:
        data = resource.read_bytes()
    except OSError as exc:
        raise SelftestError(f"{where}: cannot read the golden cases ({exc})") from None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SelftestError(
            f"{where} line {line}: not UTF-8 (byte {data[exc.start]:#04x} at offset {exc.start})"
        ) from None


def run_selftests(
    specs: list[str], pool: GradingPool, options: Mapping[str, Mapping[str, Any]] | None = None
) -> list[SelftestResult]:
    """Grade every spec's golden cases in one batch on ``pool``; one result per spec, in order. ``options``: a
    run's per-spec grader options, of which each grader's ``setup_options`` apply to its cases."""
    plans = []
    requests: list[GradeRequest] = []
    for spec in specs:
        grader = resolve_grader(spec)
        cases, where = golden_cases(grader)
        keys: frozenset[str] = getattr(grader, "setup_options", frozenset())
        setup = {k: v for k, v in (options or {}).get(spec, {}).items() if k in keys}
        skipped = unavailable(grader, setup) if cases else None
        plans.append((spec, grader, cases, where, len(requests), skipped))
        if skipped is None:
            requests.extend(
                GradeRequest(spec, c.response, c.ground_truth, {**c.options, **setup}, context=c.context)
                for c in cases
            )
    grades = pool.grade_batch(requests) if requests else []
    results = []
    for spec, grader, cases, where, start, skipped in plans:
        res = SelftestResult(spec, str(grader.name), str(grader.version), where, len(cases), skipped=skipped)
        for i, case in enumerate(cases if skipped is None else []):
            got = grades[start + i]
            if got.verdict != case.verdict:
                res.disagreements.append(Disagreement(i + 1, case, got))
        results.append(res)
    return results


def unavailable(grader: Grader, setup: Mapping[str, Any]) -> str | None:
    """The grader's own word on whether it can run on this machine (None: it can, or it does not say)."""
    method = getattr(grader, "unavailable", None)
    return method(setup) if callable(method) else None


def failures_message(results: list[SelftestResult]) -> str | None:
    """None when every grader agrees with its cases; else every disagreement, one per line."""
    lines = [f"{r.name} {r.version} [{r.source}] {d.describe()}" for r in results for d in r.disagreements]
    if not lines:
        return None
    return f"grader selftest failed ({len(lines)} disagreement(s)):\n  " + "\n  ".join(lines)


def selftest_command(names: list[str], *, workers: int, timeout_s: float) -> int:
    """Body of ``rrl graders selftest [NAME...]``: 0 when all agree, 1 listing each disagreement (or a grader
    named here that cannot run on this machine), 2 for a name nobody registered. Without names, graders that
    cannot run here are listed as skipped with the reason."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from graders import registry

    console = Console()
    specs = names or registry.available()
    try:
        for spec in specs:
            resolve_grader(spec)
        with GradingPool(workers=workers, timeout_s=timeout_s) as pool:
            results = run_selftests(specs, pool)
    except (KeyError, TypeError, ImportError, SelftestError) as exc:
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    table = Table(title="grader selftest (golden cases)", title_justify="left")
    for col in ("grader", "version", "cases", "source", "result"):
        table.add_column(col)
    for r in results:
        status = "no golden cases" if not r.cases else ("ok" if r.ok else f"FAIL ({len(r.disagreements)})")
        table.add_row(r.name, r.version, str(r.cases), r.source or "-", "skipped" if r.skipped else status)
    console.print(table)
    for r in results:
        if r.skipped:
            console.print(f"[yellow]{r.name}: skipped:[/yellow] {r.skipped}", highlight=False, soft_wrap=True)
    message = failures_message(results)
    if message is not None:
        console.print(message, highlight=False, soft_wrap=True)
        return 1
    if names and any(r.skipped for r in results):
        Console(stderr=True).print("[red]error:[/red] a grader named here cannot run on this machine (above)")
        return 1
    return 0
