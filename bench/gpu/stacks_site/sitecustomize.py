"""Where a process's threads spend their time: an in-process stack sampler for the GPU benches.

    RRL_STACKS=/tmp/stacks PYTHONPATH=bench/gpu/stacks_site:$PYTHONPATH python3 ...

Why: the GPU machine has no perf, gdb or py-spy-capable ptrace (device KINDS.md), and generation there is bound by
the host (issues 42 and 44: ~20 us per running request per decode step); this names the Python code that holds the
host. Every process that starts with this directory on ``PYTHONPATH`` and ``RRL_STACKS`` set samples all its
threads every ``RRL_STACKS_MS`` ms (default 5) and writes, at exit, ``RRL_STACKS/stacks_<pid>.json``: its argv and,
per thread name, the count of each folded stack (outermost first, ``file:function`` frames). A thread blocked in C
(a CUDA synchronisation, a lock) shows the Python line that called it; ``bench/gpu/stacks_report.py`` sums them.
Costs one GIL hand-over per sample (~50 us per 5 ms). Not imported by anything else: bench-only.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections import Counter


def _frames(frame: object, limit: int = 80) -> str:
    names: list[str] = []
    f = frame
    while f is not None and len(names) < limit:
        code = f.f_code  # type: ignore[attr-defined]
        names.append(f"{os.path.basename(code.co_filename)}:{code.co_name}")
        f = f.f_back  # type: ignore[attr-defined]
    return ";".join(reversed(names))


def _start(out: str) -> None:
    period = float(os.environ.get("RRL_STACKS_MS", "5")) / 1000.0
    counts: dict[str, Counter[str]] = {}
    t0 = time.time()

    def dump() -> None:
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, f"stacks_{os.getpid()}.json")
        snapshot = {k: dict(v) for k, v in list(counts.items())}
        with open(path + ".tmp", "w") as fh:
            json.dump(
                {"argv": sys.argv, "period_s": period, "wall_s": time.time() - t0, "threads": snapshot}, fh
            )
        os.replace(path + ".tmp", path)

    def sample() -> None:
        me = threading.get_ident()
        last = time.time()
        while True:
            time.sleep(period)
            if time.time() - last > 10.0:  # a process that ends in os._exit or a kill still leaves its counts
                last = time.time()
                dump()
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                counts.setdefault(names.get(ident, str(ident)), Counter())[_frames(frame)] += 1

    def begin() -> None:
        threading.Thread(target=sample, name="rrl-stacks", daemon=True).start()

    def forked() -> None:  # a forked child (vLLM's engine core, a worker) samples itself, from zero
        counts.clear()
        begin()

    begin()
    os.register_at_fork(after_in_child=forked)
    atexit.register(dump)


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path (the image's own, if any): this one shadows it."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in sys.path[1:]:
        path = os.path.join(d or ".", "sitecustomize.py")
        if os.path.abspath(d or ".") != here and os.path.isfile(path):
            with open(path) as fh:
                exec(compile(fh.read(), path, "exec"), {"__name__": "sitecustomize", "__file__": path})
            return


if os.environ.get("RRL_STACKS"):
    _start(os.environ["RRL_STACKS"])
_chain()
