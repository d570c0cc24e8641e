"""Entry point of a local grading worker: ``python -m graders.runtime.procworker IN_FD OUT_FD PROGRESS_FD``.

Started with ``subprocess`` (not multiprocessing) so the caller's ``__main__`` is never re-imported and
scripts need no ``if __name__ == "__main__"`` guard. Protocol (pickled ``Connection`` frames):
parent -> worker: ("warm", [grader specs]) | ("grade", [payloads]) | None (exit);
worker -> parent: ("ready",) after each warm-up; ("done", [outcomes]) with results in task order.

Results are sent in chunks (every ``FLUSH_S`` and at the end of each batch) so tiny grades do not cost one
message each. The per-grade budget does not depend on messages: before each grade the worker writes the
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

FLUSH_S = 0.002
IDLE = -1
PROGRESS_BYTES = 16  # int64 seq of the running task (IDLE between batches), float64 its monotonic start
_PR_SET_PDEATHSIG = 1


def read_progress(page: mmap.mmap) -> tuple[int, float]:
    """(seq, started) as the parent sees it. Torn reads only ever make a start look later, never earlier."""
    seq = struct.unpack_from("q", page, 0)[0]
    started = struct.unpack_from("d", page, 8)[0]
    return seq, started


def _mark(page: mmap.mmap, seq: int, started: float) -> None:
    struct.pack_into(
        "d", page, 8, started
    )  # start first, then seq: a reader never pairs a seq with an older start
    struct.pack_into("q", page, 0, seq)


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the pool's supervisor thread goes away, so no orphan keeps grading."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the closed pipe still ends the loop
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _grade_batch(payloads: list, outbox: Connection, page: mmap.mmap) -> None:
    done: list[Outcome] = []
    last_flush = time.monotonic()
    for payload in payloads:
        _mark(page, payload[0], time.monotonic())
        done.append(run_one(payload))
        if time.monotonic() - last_flush >= FLUSH_S:
            outbox.send(("done", done))
            done = []
            last_flush = time.monotonic()
    _mark(page, IDLE, 0.0)
    if done:
        outbox.send(("done", done))


def main(read_fd: int, write_fd: int, progress_fd: int) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    page = mmap.mmap(progress_fd, PROGRESS_BYTES)
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
            _grade_batch(items, outbox, page)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
