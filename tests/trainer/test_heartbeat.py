"""Inside a long step something is said (issue 47): 5-10 minute GPU steps printed nothing and looked hung. The
heartbeat's line (stage, samples generated/graded, update mini-batch k/K) goes to the log every
``logging.heartbeat_s`` and to the live display at every report; redirected output gets no live display.
Driven by an injected clock: no test here waits."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from reasoning_rl.config import LoggingConfig
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.heartbeat import Heartbeat
from reasoning_rl.trainer.metrics import MetricsLogger


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_line_is_due_every_interval_and_says_stage_and_counts(tmp_path: Path) -> None:
    clock, got = Clock(), []
    beat = Heartbeat(30.0, lambda line, due: got.append((line, due)), clock=clock)
    trace = TraceWriter(tmp_path / "trace.jsonl")
    trace.on_progress = beat.report
    beat.tick()
    assert got == []  # no step yet: nothing to say
    beat.begin(3)
    clock.now += 10
    trace.progress("generate", generated=(12, 32), graded=(10, 32))
    assert got[-1] == ("step 3: generate (generated 12/32, graded 10/32), 10 s in", False)
    clock.now += 25
    beat.tick()  # the ticker: 35 s since the last due line
    assert got[-1] == ("step 3: generate (generated 12/32, graded 10/32), 35 s in", True)
    n = len(got)
    clock.now += 5
    beat.tick()
    assert len(got) == n  # not due again until 30 s later
    with trace.span("update", 3):  # a span's start names the stage; the update reports its mini-batches
        trace.progress("update", **{"mini-batch": (2, 4)})
    assert got[-1][0] == "step 3: update (mini-batch 2/4), 40 s in"
    trace.close()


def test_a_zero_interval_makes_every_report_due() -> None:
    got: list[tuple[str, bool]] = []
    beat = Heartbeat(0.0, lambda line, due: got.append((line, due)), clock=Clock())
    beat.begin(1)
    beat.report("generate", {"generated": (1, 4)})
    beat.report("generate", {"generated": (2, 4)})
    assert [due for _, due in got] == [True, True]
    beat.start()  # no ticker at interval 0
    beat.close()


def _logger(tmp_path: Path, terminal: bool) -> tuple[MetricsLogger, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200)
    cfg = LoggingConfig(console="rich", tensorboard=False)
    return MetricsLogger(tmp_path, cfg, total_steps=4, console=console), out


def test_redirected_output_gets_due_lines_only_and_no_live_display(tmp_path: Path) -> None:
    log, out = _logger(tmp_path, terminal=False)
    log.heartbeat("step 1: generate (generated 3/8), 5 s in", False)
    log.heartbeat("step 1: generate (generated 8/8), 31 s in", True)
    log.close()
    text = out.getvalue()
    assert text.splitlines() == ["heartbeat: step 1: generate (generated 8/8), 31 s in"]
    assert "\x1b[" not in text  # no cursor movement: no live display or bar in a log


def test_a_terminal_shows_the_line_live_instead_of_printing_lines(tmp_path: Path) -> None:
    log, out = _logger(tmp_path, terminal=True)
    log.heartbeat("step 1: update (mini-batch 1/2), 7 s in", True)
    log.close()
    text = out.getvalue()
    assert "step 1: update (mini-batch 1/2)" in text and "heartbeat:" not in text
