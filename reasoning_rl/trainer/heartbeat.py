"""What a step is doing right now, for a user watching a 5-10 minute step: ``Heartbeat``.

Stages report progress through the run's trace (``TraceWriter.progress``: a span's start names its stage;
generation reports samples generated and graded, the update the micro-batch of the policy's (and the critic's)
train step under way, and the mini-batch where there are several). The heartbeat keeps the latest
and hands one line to its sink: at every report (``due=False``: a live display may show it) and, every
``logging.heartbeat_s`` seconds, with ``due=True`` (a log line). A ticker thread makes the line due even while
a stage reports nothing (one long update pass). The clock is injected and ``tick`` is public so tests drive it
without waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from reasoning_rl.trace import Counts

Sink = Callable[[str, bool], None]  # (line, due: the interval has passed since the last due line)


class Heartbeat:
    """The current step's stage and counts, as one line."""

    def __init__(self, interval_s: float, sink: Sink, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.sink = sink
        self.clock = clock
        self._lock = threading.Lock()
        self._step: int | None = None
        self._stage = ""
        self._counts: Counts = {}
        self._started = self._last = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self, step: int) -> None:
        with self._lock:
            self._step, self._stage, self._counts = step, "start", {}
            self._started = self._last = self.clock()

    def report(self, stage: str, counts: Counts) -> None:
        """Where a stage is: a report carries all of its counts (a count it leaves out is over: the micro-batch
        of the previous mini-batch, or the policy's once the critic's step reports)."""
        with self._lock:
            self._stage, self._counts = stage, dict(counts)
        self.tick(every_report=True)

    def line(self) -> str:
        with self._lock:
            counts = ", ".join(f"{name} {done}/{total}" for name, (done, total) in self._counts.items())
            into = self.clock() - self._started
            return (
                f"step {self._step}: {self._stage}"
                + (f" ({counts})" if counts else "")
                + f", {into:.0f} s in"
            )

    def tick(self, *, every_report: bool = False) -> None:
        """Hand the line to the sink: due when the interval has passed (the ticker calls this too)."""
        if self._step is None:
            return
        now = self.clock()
        with self._lock:
            due = now - self._last >= self.interval_s
            if due:
                self._last = now
        if due or every_report:
            self.sink(self.line(), due)

    def start(self) -> None:
        """The ticker: a due line every interval even when no stage reports (a long update pass)."""
        if self.interval_s <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="rrl-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s / 4):
            self.tick()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
