"""Where ``rrl grade`` writes: the summary to stdout, everything else (progress, messages, graders' prints) to
stderr, so ``rrl grade ... > summary.txt`` or a pipe gets the summary alone."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from rich.console import Console

# Rich wraps at 80 columns when it cannot ask a terminal: a log file or pipe would get tables cut mid-row.
NON_TTY_WIDTH = 1000


def results_console(stderr: bool = False) -> Console:
    """A console at the terminal's width, or unbounded (tables at their natural width) when not a terminal."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=NON_TTY_WIDTH)


def print_listing(rows: list[dict[str, Any]], title: str, columns: tuple[str, ...], as_json: bool) -> None:
    """What a ``list`` command prints (`rrl graders list`, `rrl tools list`): the rows as JSON, or a table of
    ``columns`` titled ``title``."""
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(row[col] for col in columns))
    results_console().print(table)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point fd 1 (inherited by grading worker processes) and ``sys.stdout`` (graders loaded in this process)
    at stderr while grading, so a grader's prints never mix into the summary on stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)
