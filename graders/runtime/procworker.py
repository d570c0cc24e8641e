"""Entry point of a local grading worker: ``python -m graders.runtime.procworker PROGRESS_FD``.

A ``graders.runtime.killable`` process (not multiprocessing), so the caller's ``__main__`` is never
re-imported, scripts need no ``if __name__ == "__main__"`` guard, and a kill takes everything the graders
started. Protocol over its private channel: parent -> worker: pickled ``Connection`` frames of
("warm", [grader specs]) | ("grade", [payloads]) | None (exit); worker -> parent: checked frames
(``graders.runtime.frames``) of ("ready",) after each warm-up and ("done", [outcomes]) in task order.

Results are sent in chunks (every ``FLUSH_S``, halfway through each batch and at its end) so tiny grades
do not cost one message each, while the parent still hears in time to send the next batch before this
one runs out (it refills a queue once half of it is done). The per-grade budget does not depend on
messages: before each grade the worker writes the task's sequence number and start time into a shared page
(``progress``) that the parent reads, with a count of the tasks it has started, so when it dies the parent
knows which tasks ran (and may be the cause) and which never started.
"""

from __future__ import annotations

import mmap
import os
import signal
import struct
import sys
import time
from multiprocessing.connection import Connection

from graders.runtime.frames import frame
from graders.runtime.killable import child_channel
from graders.runtime.request import warm_grader
from graders.runtime.worker import Outcome, run_one

FLUSH_S = 0.02
IDLE = -1
# int64 seq of the running task (IDLE between batches), float64 its monotonic start, int64 tasks started
PROGRESS_BYTES = 24


def read_started(page: mmap.mmap) -> int:
    """How many tasks the worker has started so far (final once it is dead)."""
    return int(struct.unpack_from("q", page, 16)[0])


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
        self._started = memoryview(page)[8:16].cast("d")
        self._count = memoryview(page)[16:PROGRESS_BYTES].cast("q")

    def mark(self, seq: int, started: float) -> None:
        self._started[0] = started  # start first, then seq: a reader never pairs a seq with an older start
        self._seq[0] = seq

    def begin(self, seq: int, started: float) -> None:
        """Mark a task as running and count it as started."""
        self.mark(seq, started)
        self._count[0] += 1


class _Outbox:
    """Checked frames straight onto the channel fd (blocking: the parent always drains)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def send(self, msg: object) -> None:
        data = frame(msg)
        while data:
            data = data[os.write(self._fd, data) :]


def _grade_batch(payloads: list, outbox: _Outbox, progress: _Progress) -> None:
    done: list[Outcome] = []
    last_flush = time.monotonic()
    half = len(payloads) // 2
    for i, payload in enumerate(payloads, 1):
        progress.begin(payload[0], time.monotonic())
        done.append(run_one(payload))
        if i == half or time.monotonic() - last_flush >= FLUSH_S:
            outbox.send(("done", done))
            done = []
            last_flush = time.monotonic()
    # A real clock, not 0.0: a reader pairing the old seq with this start must not see an ancient start.
    progress.mark(IDLE, time.monotonic())
    if done:
        outbox.send(("done", done))


def main(progress_fd: int) -> None:
    read_fd, write_fd = child_channel()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    inbox, outbox = Connection(read_fd, writable=False), _Outbox(write_fd)
    progress = _Progress(mmap.mmap(progress_fd, PROGRESS_BYTES))
    os.close(progress_fd)
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
    main(int(sys.argv[1]))
