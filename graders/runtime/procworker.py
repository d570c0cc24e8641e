"""Entry point of a local grading worker process: ``python -m graders.runtime.procworker READ_FD WRITE_FD``.

Started with ``subprocess`` (not multiprocessing) so the caller's ``__main__`` is never re-imported and
scripts need no ``if __name__ == "__main__"`` guard. Protocol (pickled messages):
parent -> worker: ("warm", [grader specs]) | ("grade", [payloads]) | None (exit);
worker -> parent: ("ready",) after each warm-up, then one ``run_one`` outcome per payload, in order.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
from multiprocessing.connection import Connection

from graders.runtime.request import resolve_grader
from graders.runtime.worker import run_one

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the pool's supervisor thread goes away, so no orphan keeps grading."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the closed pipe still ends the loop
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def main(read_fd: int, write_fd: int) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
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
                # A spec that fails to load is reported per sample by run_one; warming is best effort.
                with contextlib.suppress(Exception):
                    resolve_grader(spec)
            outbox.send(("ready",))
        else:
            for payload in items:
                outbox.send(run_one(payload))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
