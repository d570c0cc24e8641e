"""Entry point of a local grading worker: ``python -m graders.runtime.procworker IN_FD OUT_FD PROGRESS_FD``.

Started with ``subprocess`` (not multiprocessing) so the caller's ``__main__`` is never re-imported and
scripts need no ``if __name__ == "__main__"`` guard. Protocol (pickled ``Connection`` frames):
parent -> worker: ("warm", [grader specs]) | ("grade", [payloads]) | None (exit);
worker -> parent: ("ready",) after each warm-up; ("done", [outcomes]) with results in task order.

Results are sent in chunks (every ``FLUSH_S``, halfway through each batch and at its end) so tiny grades
do not cost one message each, while the parent still hears in time to send the next batch before this
one runs out (it refills a queue once half of it is done). The per-grade budget does not depend on messages: before each grade the worker writes the
task's sequence number and start time into a shared page (``progress``) that the parent reads.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import signal
import struct
import sys
import time
from multiprocessing.connection import Connection

from graders.runtime.request import warm_grader
from graders.runtime.worker import Outcome, run_one

FLUSH_S = 0.02
IDLE = -1
PROGRESS_BYTES = 16  # int64 seq of the running task (IDLE between batches), float64 its monotonic start
_PR_SET_PDEATHSIG = 1


def read_progress(page: mmap.mmap) -> tuple[int, float]:
    """(seq, started) as the parent sees it. The worker stores the start before the seq, each with one
    8-byte store, and every start it stores is a current clock, so a read racing a write can only make a
    start look later, never earlier (which would kill a worker for a budget it has not spent)."""
    seq = struct.unpack_from("q", page, 0)[0]
    started = struct.unpack_from("d", page, 8)[0]
    return seq, started


class _Progress:
    """The worker's side of the progress page.

    Not ``struct.pack_into``: it zero-fills the field before writing it, so a parent reading in between
    saw a start of 0.0 -- a grade "running since boot" -- and killed a healthy worker for a timeout.
    Item assignment on a typed memoryview is a single aligned store.
    """

    def __init__(self, page: mmap.mmap) -> None:
        self._seq = memoryview(page)[0:8].cast("q")
        self._started = memoryview(page)[8:PROGRESS_BYTES].cast("d")

    def mark(self, seq: int, started: float) -> None:
        self._started[0] = started  # start first, then seq: a reader never pairs a seq with an older start
        self._seq[0] = seq


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the pool's supervisor thread goes away, so no orphan keeps grading."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the closed pipe still ends the loop
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _grade_batch(payloads: list, outbox: Connection, progress: _Progress) -> None:
    done: list[Outcome] = []
    last_flush = time.monotonic()
    half = len(payloads) // 2
    for i, payload in enumerate(payloads, 1):
        progress.mark(payload[0], time.monotonic())
        done.append(run_one(payload))
        if i == half or time.monotonic() - last_flush >= FLUSH_S:
            outbox.send(("done", done))
            done = []
            last_flush = time.monotonic()
    # A real clock, not 0.0: a reader pairing the old seq with this start must not see an ancient start.
    progress.mark(IDLE, time.monotonic())
    if done:
        outbox.send(("done", done))


def main(read_fd: int, write_fd: int, progress_fd: int) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    progress = _Progress(mmap.mmap(progress_fd, PROGRESS_BYTES))
    while True:
        try:
            msg = inbox.recv()
        except EOFError:
            return
        if msg is None:
            return
        kind, items = msg
        if kind == "warm":
            for spec in items:
                warm_grader(spec)
            outbox.send(("ready",))
        else:
            _grade_batch(items, outbox, progress)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
