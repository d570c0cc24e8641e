"""``rrl grade --regrade OLD.jsonl``: re-judge stored ``rrl grade`` results with the installed graders and list
every verdict that flipped, per (grader, old version -> new version) pair.

Each result line carries its input fields (``response``/``responses``, ``ground_truth``...), the grader's name
and version, and one stored grade per response, so nothing but the file is needed. Lines that cannot be
re-graded (malformed rows, graders no longer installed) are counted and listed, never silently dropped.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graders.evaluation.fingerprint import record_path
from graders.evaluation.inputs import BadRow, read_rows
from graders.evaluation.rows import RESULT_KEYS, Router, RowProblem, parse_row
from graders.runtime import GradeRequest, GradingPool


@dataclass(frozen=True)
class Flip:
    row: int
    response: int
    old: str
    new: str
    reason: str


@dataclass
class PairReport:
    """One grader version pair: how many responses were re-judged and which verdicts changed."""

    grader: str
    old_version: str
    new_version: str
    responses: int = 0
    flips: list[Flip] = field(default_factory=list)

    def transitions(self) -> Counter[str]:
        return Counter(f"{f.old} -> {f.new}" for f in self.flips)


@dataclass
class RegradeReport:
    pairs: dict[tuple[str, str, str], PairReport] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # "row N: why"

    @property
    def flipped(self) -> int:
        return sum(len(p.flips) for p in self.pairs.values())


def _input_row(line: dict[str, Any]) -> dict[str, Any]:
    """The input row a result line was made from (``rrl grade`` renamed clashing input keys to input_*)."""
    out = {k: v for k, v in line.items() if k not in RESULT_KEYS}
    for k in RESULT_KEYS:
        if f"input_{k}" in line:
            out.pop(f"input_{k}", None)
            out[k] = line[f"input_{k}"]
    return out


def stored_specs(path: Path) -> dict[str, str]:
    """Grader name -> the routing spec that produced it, from ``rrl grade``'s run record next to ``path``
    (a result line stores the grader's name; a plugin routed as ``module:attr`` is only found by its spec).
    No record (results from elsewhere): empty, and each name is used as its own spec."""
    record = record_path(path)
    if not record.exists():
        return {}
    try:
        graders = json.loads(record.read_text(encoding="utf-8")).get("graders", {})
        if not isinstance(graders, dict):
            raise ValueError(f"field `graders` is a {type(graders).__name__}, not an object")
    except (OSError, ValueError, AttributeError, RecursionError) as exc:  # JSONDecodeError, UnicodeError too
        raise OSError(f"{record} is unreadable ({exc}); move it away to re-grade by grader name") from exc
    return {str(ident.get("name")): str(spec) for spec, ident in graders.items() if isinstance(ident, dict)}


@dataclass(frozen=True)
class _Plan:
    """One results line to re-judge: its row, the grader spec, the stored version and verdicts."""

    row: int
    spec: str
    old_version: str
    old_verdicts: list[str]


def _stored_grades(line: dict[str, Any]) -> list[str]:
    """The stored verdicts of a results line; ``RowProblem`` unless `grades` is a list of grade objects."""
    stored = line.get("grades")
    if not isinstance(stored, list) or not all(
        isinstance(g, dict) and isinstance(g.get("verdict"), str) for g in stored
    ):
        raise RowProblem(
            f"field `grades` must be a list of grade objects with a `verdict`, got {stored!r:.200}"
        )
    return [g["verdict"] for g in stored]


def _plan(number: int, line: dict[str, Any], specs: dict[str, str], allowed: frozenset[str],
          router: Router) -> tuple[_Plan, list[str], Any, Any]:  # fmt: skip
    """What re-grading results line ``number`` takes, checking each field it reads; ``RowProblem`` names the
    field. A grader loads only by a registered name or as a ``module:attr`` spec the user gave (``allowed``):
    a results file (or the run record beside it) is data, and naming a module must not import it."""
    row = line.get("row", number)
    if isinstance(row, bool) or not isinstance(row, int) or row < 1:
        raise RowProblem(f"field `row` must be a positive integer, got {row!r:.200}")
    name = line.get("grader")
    if not isinstance(name, str) or not name:
        raise RowProblem(f"field `grader` must be a grader name, got {name!r:.200}")
    verdicts = _stored_grades(line)
    version = line.get("grader_version", "?")
    if not isinstance(version, (str, int)) or isinstance(version, bool):
        raise RowProblem(f"field `grader_version` must be a string, got {version!r:.200}")
    spec = specs.get(name, name)
    if ":" in spec and spec not in allowed:
        raise RowProblem(
            f"grader {name!r} was loaded as {spec!r}; a module:attr grader is re-graded only when named on "
            f"the command line (--grader {spec})"
        )
    job = parse_row(row, _input_row(line), Router(default=spec))
    router.identity(job.spec)
    if len(job.responses) != len(verdicts):
        raise RowProblem(f"{len(job.responses)} responses but {len(verdicts)} stored grades")
    return _Plan(job.number, job.spec, str(version), verdicts), job.responses, job.ground_truth, job.context


def regrade(
    path: Path,
    pool: GradingPool,
    options: dict[str, Any] | None = None,
    allowed: frozenset[str] = frozenset(),
) -> RegradeReport:
    """Re-grade every stored response in ``path`` on ``pool`` and compare with the stored verdicts;
    ``allowed``: the ``module:attr`` grader specs the user named (``--grader``), which alone may be imported."""
    report = RegradeReport()
    specs = stored_specs(path)
    plans: list[_Plan] = []
    requests: list[GradeRequest] = []
    router = Router()
    for number, line in read_rows(path):
        if isinstance(line, BadRow):
            report.skipped.append(line.reason)  # it names the file and the line
            continue
        if not line.get("grader") or not line.get("grades"):
            report.skipped.append(
                f"{path.name} line {number}: no stored grades (row {line.get('row', '?')!r:.50}: "
                f"{str(line.get('reason', 'not graded'))[:500]})"
            )
            continue
        try:
            plan, responses, truth, context = _plan(number, line, specs, allowed, router)
        except RowProblem as exc:
            report.skipped.append(f"{path.name} line {number}: {exc}")
            continue
        plans.append(plan)
        requests.extend(
            GradeRequest(plan.spec, r, truth, dict(options or {}), context=context) for r in responses
        )
    grades = pool.grade_batch(requests) if requests else []
    at = 0
    for plan in plans:
        number, spec, old_version, old_verdicts = plan.row, plan.spec, plan.old_version, plan.old_verdicts
        name, new_version = router.identity(spec)
        pair = report.pairs.setdefault(
            (name, old_version, new_version), PairReport(name, old_version, new_version)
        )
        for i, old in enumerate(old_verdicts):
            new = grades[at + i]
            pair.responses += 1
            if new.verdict != old:
                pair.flips.append(Flip(number, i, old, new.verdict, new.reason))
        at += len(old_verdicts)
    return report


def print_report(console: Any, report: RegradeReport, path: Path) -> None:
    """The terminal view: one table of version pairs, then every flipped verdict."""
    from rich.table import Table

    table = Table(title=f"regrade: {path}", title_justify="left")
    for col in ("grader", "stored version", "installed version", "responses", "flipped", "transitions"):
        table.add_column(col)
    for p in report.pairs.values():
        trans = ", ".join(f"{k}: {v}" for k, v in sorted(p.transitions().items())) or "-"
        table.add_row(p.grader, p.old_version, p.new_version, str(p.responses), str(len(p.flips)), trans)
    console.print(table)
    for p in report.pairs.values():
        for f in p.flips:
            console.print(
                f"flipped: row {f.row} response {f.response} [{p.grader} {p.old_version} -> "
                f"{p.new_version}]: {f.old} -> {f.new}" + (f" ({f.reason})" if f.reason else ""),
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
    for s in report.skipped:
        console.print(f"[yellow]not re-graded[/yellow]: {s}", highlight=False, soft_wrap=True)
    console.print(
        f"{report.flipped} verdict(s) flipped out of {sum(p.responses for p in report.pairs.values())}"
    )


def write_html(out: Path, report: RegradeReport, path: Path) -> None:
    """The same tables as a self-contained HTML page."""
    e = html.escape
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>regrade {e(path.name)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:4px 8px}"
        "table{border-collapse:collapse;margin-bottom:1.5em}</style>",
        f"<h1>Regrade of {e(str(path))}</h1><p>{report.flipped} verdict(s) flipped</p>",
        "<table><tr><th>grader</th><th>stored version</th><th>installed version</th><th>responses</th>"
        "<th>flipped</th></tr>",
    ]
    for p in report.pairs.values():
        parts.append(
            f"<tr><td>{e(p.grader)}</td><td>{e(p.old_version)}</td><td>{e(p.new_version)}</td>"
            f"<td>{p.responses}</td><td>{len(p.flips)}</td></tr>"
        )
    parts.append("</table>")
    for p in report.pairs.values():
        if not p.flips:
            continue
        parts.append(
            f"<h2>{e(p.grader)} {e(p.old_version)} &rarr; {e(p.new_version)}</h2>"
            "<table><tr><th>row</th><th>response</th><th>stored</th><th>now</th><th>reason</th></tr>"
        )
        parts.extend(
            f"<tr><td>{f.row}</td><td>{f.response}</td><td>{e(f.old)}</td><td>{e(f.new)}</td>"
            f"<td>{e(f.reason)}</td></tr>"
            for f in p.flips
        )
        parts.append("</table>")
    if report.skipped:
        parts.append(
            "<h2>Not re-graded</h2><ul>" + "".join(f"<li>{e(s)}</li>" for s in report.skipped) + "</ul>"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts) + "\n", encoding="utf-8")


def regrade_command(
    path: Path,
    *,
    report_path: Path | None,
    options: dict[str, Any],
    allowed: frozenset[str] = frozenset(),
    workers: int,
    timeout_s: float,
    backend: str,
    ray_address: str | None,
) -> int:
    """Body of ``rrl grade --regrade``: exit 0 with the report, 2 when the file cannot be read. ``allowed``:
    the ``module:attr`` graders named on the command line, the only ones a results line may load."""
    from rich.console import Console
    from rich.markup import escape

    from graders.evaluation.inputs import InputError

    console = Console()
    try:
        with GradingPool(
            workers=workers,
            backend=backend,  # type: ignore[arg-type]
            ray_address=ray_address,
            timeout_s=timeout_s,
        ) as pool:
            result = regrade(path, pool, options, allowed)
    except (InputError, OSError) as exc:
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    print_report(console, result, path)
    if report_path is not None:
        write_html(report_path, result, path)
        Console(stderr=True).print(f"report: {report_path}")
    return 0
