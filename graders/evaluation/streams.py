"""Where ``rrl grade`` writes: the summary to stdout, everything else (progress, messages, graders' prints) to
stderr, so ``rrl grade ... > summary.txt`` or a pipe gets the summary alone."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from rich.console import Console

# Rich wraps at 80 columns when it cannot ask a terminal: a log file or pipe would get tables cut mid-row.
NON_TTY_WIDTH = 1000


def results_console(stderr: bool = False) -> Console:
    """A console at the terminal's width, or unbounded (tables at their natural width) when not a terminal."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=NON_TTY_WIDTH)


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
