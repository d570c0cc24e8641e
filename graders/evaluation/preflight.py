"""Run-wide mistakes, caught before any row is written: an unknown ``--grader``, options a grader of the run
rejects, rows that no grader covers. Without this, each would cost one error line per row, and a resume would
then skip every row as "already done".

Every row is routed up front (``--grader``, ``--source-grader``, a row's ``grader`` field, the well-known
``data_source`` defaults), so the options are checked against every grader the rows go to, not only the ones
named on the command line. Options are checked through a grader's optional ``check_options(options)`` hook
(raise ``ValueError`` with a message naming the option); graders without the hook are not checked up front.
"""

from __future__ import annotations

from pathlib import Path

from graders.evaluation.inputs import BadRow, read_rows
from graders.evaluation.options import GraderOptions
from graders.evaluation.rows import Router, RowProblem
from graders.runtime import resolve_grader
from graders.types import Grader


class RunError(ValueError):
    """A mistake in the command itself (flags, options): the run stops before grading anything."""


def load_grader(spec: str, flag: str) -> Grader:
    try:
        return resolve_grader(spec)
    except Exception as exc:  # unknown name, unimportable spec, not a Grader: all the user's flag
        raise RunError(f"{flag} {spec}: {exc}") from exc


def check_options(grader: Grader, spec: str, options: GraderOptions, why: str = "") -> None:
    check = getattr(grader, "check_options", None)
    if check is None:
        return
    mine = options.for_grader(spec, str(grader.name))
    try:
        check(mine)
    except (ValueError, TypeError) as exc:
        hint = ""
        if set(options.common) - set(options.scoped.get(str(grader.name), {})):
            hint = (
                "; give an option to one grader only with --option GRADER.KEY=VALUE (e.g. math.mode=lenient)"
            )
        raise RunError(f"--option/--mode for grader {spec!r}{why}: {exc}{hint}") from exc


def _routes(router: Router, input: Path, split: str | None) -> tuple[dict[str, str], str | None]:
    """Every grader spec the rows route to, with why (its first row and data_source), and the problem of the
    first row when it cannot be routed and names no grader of its own (the user forgot ``--grader``)."""
    routes: dict[str, str] = {}
    first_problem: str | None = None
    first = True
    for number, row in read_rows(input, split):
        if isinstance(row, BadRow):
            continue
        try:
            spec = router.route(row)
        except RowProblem as exc:
            if first and row.get("grader") is None:
                first_problem = f"the first row has {exc}"
            first = False
            continue  # a bad `grader` field is that row's problem
        first = False
        if spec not in routes:
            source = row.get("data_source")
            routes[spec] = f" (row {number}" + (f", data_source {source!r})" if source is not None else ")")
    return routes, first_problem


def preflight(router: Router, options: GraderOptions, input: Path, split: str | None) -> dict[str, Grader]:
    """Load the graders named on the command line, route every row, and check each grader's options; refuse
    a run whose rows name no grader, or whose ``GRADER.KEY`` options name no grader of the run. Returns the
    loaded graders by spec."""
    loaded: dict[str, Grader] = {}
    if router.default:
        loaded[router.default] = load_grader(router.default, "--grader")
    for source, spec in router.by_source.items():
        loaded.setdefault(spec, load_grader(spec, f"--source-grader {source}="))
    routes, problem = _routes(router, input, split)
    if problem is not None:
        raise RunError(f"{input}: {problem}")
    names: dict[str, str] = {}
    for spec, grader in loaded.items():
        check_options(grader, spec, options, routes.get(spec, ""))
        names[spec] = str(grader.name)
    for spec, why in routes.items():
        if spec in loaded:
            continue
        try:
            grader = resolve_grader(spec)
        except Exception:  # an unknown per-row grader name is that row's error line
            continue
        check_options(grader, spec, options, why)
        names[spec] = str(grader.name)
    unused = options.unused_scopes(names)
    if unused:
        raise RunError(
            f"--option {unused[0]}.KEY: no row of {input} is graded by {unused[0]!r} "
            f"(graders of this run: {', '.join(sorted(set(names.values()))) or 'none'})"
        )
    return loaded
