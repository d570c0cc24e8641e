"""The math grader's SymPy helpers: ``HelperPool`` children that import SymPy once and answer judgements.

SymPy can run for hours or eat all memory on a hostile answer (``10^{10^{10}}``, huge factorials), and
SIGALRM only works on the main thread, so every SymPy judgement runs in a helper the caller can SIGKILL
(``graders.runtime.helper_pool``). Children carry an address-space rlimit, so a memory bomb dies as a
``MemoryError`` (answered) or a crash (reported), never takes the host.
"""

from __future__ import annotations

import sys

from graders.runtime.helper_pool import HelperPool, WorkerCrashed, WorkerTimeout, serve

__all__ = ["MEMORY_LIMIT_BYTES", "WorkerCrashed", "WorkerPool", "WorkerTimeout"]

MEMORY_LIMIT_BYTES = 3 * 1024**3


class WorkerPool(HelperPool):
    """Warm SymPy helpers (see ``HelperPool``)."""

    def __init__(self, max_workers: int = 4, startup_timeout_s: float = 60.0) -> None:
        super().__init__("graders.math.worker", max_workers, startup_timeout_s)


def _serve() -> None:
    """Child side: import SymPy once, then answer judgements (``graders.math.judge_request``)."""
    sys.set_int_max_str_digits(20000)
    from graders.math.judge_request import answer, warm_up  # imports SymPy

    warm_up()
    serve(answer, MEMORY_LIMIT_BYTES)


if __name__ == "__main__":
    _serve()
