"""Python-tool trajectory benchmark (issue 33): what a tool-integrated-reasoning trajectory pays for its calls.

- ``tir``: a cell ``import sympy, numpy`` that solves an equation, each call a new trajectory (sandbox cleaned
  between them): cold (a new sandbox: container/namespace start + the fork server's sympy/numpy preload) and
  warm p50/p99. Target: warm p50 <= 100 ms.
- ``trajectory``: one trajectory of 10 calls, stdlib cells (so the replay design before issue 33 can run them
  too), each cell printing its own run time (``own``, measured inside the cell). Target: total tool latency
  <= 1.5 x sum(own) + 10 x 30 ms. Run it at a checkout of the replay design (e.g. main 5090d93) for its figure.
Uses only ``PythonTool(sandbox)``, ``call`` and ``end_session``, so it runs against both designs. Writes
bench/out/tool_trajectory.json with the load averages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from reasoning_rl.tools.python_tool import PythonTool
from sandboxes import open_sandbox

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "tool_trajectory.json"
TIR = (
    "import sympy, numpy\nx = sympy.symbols('x')\n"
    "print(sympy.solve(x**2 - 5*x + 6, x), numpy.roots([1, -5, 6]).round(6).tolist())"
)
_OWN = "import time as _time\n_t0 = _time.perf_counter()\n{body}\nprint('own', _time.perf_counter() - _t0)"
BODIES = [
    "import math, random, os, uuid\nseed = os.urandom(4).hex()\nN = 20000",
    "primes = [p for p in range(2, N) if all(p % d for d in range(2, int(p ** 0.5) + 1))]",
    "print(len(primes), seed)",
    "fib = [0, 1]\nfor _ in range(2000):\n    fib.append(fib[-1] + fib[-2])",
    "print(len(str(fib[-1])))",
    "open('/tmp/cells.txt', 'w').write(' '.join(map(str, primes[:500])))",
    "data = [random.random() for _ in range(50000)]\nprint(round(sum(data) / len(data), 2))",
    "import fractions\nh = sum(fractions.Fraction(1, k) for k in range(1, 300))\nprint(h.denominator % 1000)",
    "words = open('/tmp/cells.txt').read().split()\nprint(len(words), seed)",
    "print(math.factorial(500) % 1000003, uuid.UUID(int=len(primes)))",
]


def _sandbox(backend: str, pool: int) -> Any:
    try:  # the live-interpreter design: its scientific image; the replay design has none
        from sandboxes.image import SCI_IMAGE

        image = {"image": SCI_IMAGE}
    except ImportError:
        image = {}
    size = {"pool_size": pool} if backend == "docker" else {}
    return open_sandbox(backend, **size, **image)


def _call(tool: PythonTool, code: str, session: str) -> tuple[float, str, bool]:
    r = asyncio.run(tool.call({"code": code}, session=session, budget_s=20.0))
    return r.latency_s * 1000, r.text, r.ok


def tir(backend: str, n: int) -> dict[str, Any]:
    sandbox = _sandbox(backend, 1)
    tool = PythonTool(sandbox, pool_size=1)
    try:
        cold_ms, text, ok = _call(tool, TIR, "cold")
        if not ok or "[2, 3]" not in text:
            raise SystemExit(f"TIR cell failed: {text}")
        tool.end_session("cold")
        lat = []
        for i in range(n):
            ms, text, ok = _call(tool, TIR, f"tir-{i}")
            if not ok:
                raise SystemExit(f"TIR cell failed: {text}")
            lat.append(ms)
            tool.end_session(f"tir-{i}")
            time.sleep(0.05)  # the sandbox is cleaned off the caller's thread: let it finish
    finally:
        tool.close()
        sandbox.close()
    ordered = sorted(lat)
    return {
        "backend": backend,
        "cold_ms": round(cold_ms, 1),
        "warm_p50_ms": round(statistics.median(lat), 1),
        "warm_p99_ms": round(ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))], 1),
        "calls": n,
    }


def trajectory(backend: str, repeats: int) -> dict[str, Any]:
    sandbox = _sandbox(backend, 1)
    tool = PythonTool(sandbox, pool_size=1)
    totals, owns = [], []
    try:
        _call(tool, "1", "warm-up")
        tool.end_session("warm-up")
        for k in range(repeats):
            total = own = 0.0
            for body in BODIES:
                ms, text, ok = _call(tool, _OWN.format(body=body), f"traj-{k}")
                if not ok:
                    raise SystemExit(f"trajectory cell failed: {text}")
                total += ms
                own += 1000 * float(text.rsplit("own ", 1)[1].split()[0])
            tool.end_session(f"traj-{k}")
            time.sleep(0.05)
            totals.append(total)
            owns.append(own)
    finally:
        tool.close()
        sandbox.close()
    total, own = statistics.median(totals), statistics.median(owns)
    bound = 1.5 * own + len(BODIES) * 30
    return {
        "backend": backend,
        "calls": len(BODIES),
        "total_latency_ms": round(total, 1),
        "sum_own_ms": round(own, 1),
        "bound_ms": round(bound, 1),
        "met": total <= bound,
        "repeats": repeats,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="docker,local")
    ap.add_argument("--tir-calls", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--skip-tir", action="store_true", help="only the trajectory (the replay design has no sympy)"
    )
    args = ap.parse_args()
    load_before = os.getloadavg()
    runs = []
    for backend in args.backends.split(","):
        if not args.skip_tir:
            runs.append({"tir": tir(backend, args.tir_calls)})
            print(json.dumps(runs[-1]))
        runs.append({"trajectory": trajectory(backend, args.repeats)})
        print(json.dumps(runs[-1]))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "machine": f"{platform.node()} {os.cpu_count()} cpus",
                "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
                "runs": runs,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
