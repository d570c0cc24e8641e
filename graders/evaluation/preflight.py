"""Run-wide mistakes, caught before any row is written: an unknown ``--grader``, options the grader rejects,
rows that no grader covers. Without this, each would cost one error line per row, and a resume would then
skip every row as "already done".

Options are checked through a grader's optional ``check_options(options)`` hook (raise ``ValueError`` with a
message naming the option); graders without the hook are not checked up front.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graders.evaluation.inputs import BadRow, read_rows
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


def check_options(grader: Grader, spec: str, options: Mapping[str, Any]) -> None:
    check = getattr(grader, "check_options", None)
    if check is None:
        return
    try:
        check(dict(options))
    except (ValueError, TypeError) as exc:
        raise RunError(f"--option/--mode for grader {spec!r}: {exc}") from exc


def preflight(
    router: Router, options: Mapping[str, Any], input: Path, split: str | None
) -> dict[str, Grader]:
    """Load the graders named on the command line and check the options against them; then check that the
    first row can be routed (no ``grader`` field, no ``--grader``, no matching ``--source-grader``: the user
    forgot ``--grader``). Returns the loaded graders by spec."""
    loaded: dict[str, Grader] = {}
    if router.default:
        loaded[router.default] = load_grader(router.default, "--grader")
    for source, spec in router.by_source.items():
        loaded.setdefault(spec, load_grader(spec, f"--source-grader {source}="))
    for spec, grader in loaded.items():
        check_options(grader, spec, options)
    first = next((row for _, row in read_rows(input, split) if not isinstance(row, BadRow)), None)
    if first is not None:
        try:
            spec = router.route(first)
        except RowProblem as exc:
            if first.get("grader") is None:
                raise RunError(f"{input}: the first row has {exc}") from exc
            return loaded  # a bad `grader` field is that row's problem
        if spec not in loaded and first.get("grader") is not None:
            try:
                grader = resolve_grader(spec)
            except Exception:  # an unknown per-row grader name is that row's error line
                return loaded
            check_options(grader, spec, options)
    return loaded
