"""Python-tool benchmark: many concurrent trajectories, each making 2 stateful calls (one live interpreter each).

- sequential: one trajectory at a time, the per-call service time (what one call costs when nothing queues);
  target: warm p50 <= 100 ms on this 2-core machine. ``bare_p50_ms``: a bare ``python3 -c`` run through the same
  sandbox, so ``p50_ms - bare_p50_ms`` is the tool's own cost (fork server, session hand-over, output handling).
- breakdown (warm only): where a warm call's time goes, p50 of ``true`` (the sandbox round trip: socket, supervisor,
  clean-up), a bare ``python3 -I -S -c pass`` (interpreter start) and the tool's first call; the rest of a call
  is the fork server (a new interpreter per trajectory) and the clean-up between trajectories.
- concurrent: TRAJECTORIES trajectories in flight at once (asyncio, as the rollout loop runs them): per-call latency
  including the wait for a free sandbox, and calls/s.
Modes: ``warm`` (the Docker pool, POOL containers reused) and ``cold`` (``warm=False``: one container per call; run
on fewer trajectories, it is seconds per call). Writes bench/out/tool_calls.json.
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

from reasoning_rl.tools import ToolResult
from reasoning_rl.tools.python_tool import PythonTool
from sandboxes import Limits, RunRequest, Sandbox, open_sandbox

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "tool_calls.json"
CELLS = (
    "import math\nn = {i} * 7 + 3\nprimes = [p for p in range(2, 200) if all(p % d for d in range(2, p))]",
    "print(n, len(primes), math.factorial(n % 20))",
)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _trajectory(tool: PythonTool, i: int, budget_s: float) -> list[ToolResult]:
    session = f"bench-{i}"
    results = [
        await tool.call({"code": cell.format(i=i)}, session=session, budget_s=budget_s) for cell in CELLS
    ]
    tool.end_session(session)
    return results


async def _concurrent(tool: PythonTool, n: int, budget_s: float) -> tuple[list[ToolResult], float]:
    started = time.monotonic()
    per_traj = await asyncio.gather(*(_trajectory(tool, i, budget_s) for i in range(n)))
    return [r for rs in per_traj for r in rs], time.monotonic() - started


async def _sequential(tool: PythonTool, n: int, budget_s: float) -> list[ToolResult]:
    return [r for i in range(n) for r in await _trajectory(tool, 10_000 + i, budget_s)]


def _bare_p50_ms(sandbox: Sandbox, n: int, command: tuple[str, ...] = ("python3", "-c", "print(1)")) -> float:
    lat = []
    for _ in range(n):
        started = time.monotonic()
        r = sandbox.run(RunRequest(list(command), limits=Limits(wall_s=10)))
        lat.append((time.monotonic() - started) * 1000)
        if not r.ok:
            raise SystemExit(f"bare sandbox run failed: {r}")
    return round(statistics.median(lat), 1)


def _breakdown(sandbox: Sandbox, n: int) -> dict[str, float]:
    return {
        "sandbox_round_trip_p50_ms": _bare_p50_ms(sandbox, n, ("true",)),
        "interpreter_start_p50_ms": _bare_p50_ms(sandbox, n, ("python3", "-I", "-S", "-c", "pass")),
    }


def _summary(results: list[ToolResult], wall_s: float | None = None) -> dict[str, Any]:
    lat = [r.latency_s * 1000 for r in results]
    out: dict[str, Any] = {
        "calls": len(results),
        "ok": sum(r.ok for r in results),
        "p50_ms": round(_pct(lat, 0.5), 1),
        "p99_ms": round(_pct(lat, 0.99), 1),
        "first_call_p50_ms": round(statistics.median(lat[0::2]), 1),
        "second_call_p50_ms": round(statistics.median(lat[1::2]), 1),  # the first call's interpreter, kept
    }
    if wall_s is not None:
        out.update(wall_s=round(wall_s, 2), calls_per_s=round(len(results) / wall_s, 1))
    return out


def bench(mode: str, trajectories: int, sequential: int, pool: int, budget_s: float) -> dict[str, Any]:
    sandbox = open_sandbox("docker", pool_size=pool, warm=mode == "warm")
    tool = PythonTool(sandbox, pool_size=pool)
    try:
        asyncio.run(_sequential(tool, 2, budget_s))  # first runs per container pay Python's cold caches
        bare = _bare_p50_ms(sandbox, sequential)
        parts = _breakdown(sandbox, sequential) if mode == "warm" else {}
        seq = asyncio.run(_sequential(tool, sequential, budget_s))
        conc, wall = asyncio.run(_concurrent(tool, trajectories, budget_s))
    finally:
        tool.close()
        sandbox.close()
    bad = [r for r in seq + conc if not r.ok]
    if bad:
        raise SystemExit(f"{len(bad)} calls failed, e.g. {bad[0]}")
    return {
        "mode": mode,
        "pool": pool,
        "trajectories": trajectories,
        "sequential": {**_summary(seq), "bare_p50_ms": bare, **parts},
        "concurrent": _summary(conc, wall),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=256)
    ap.add_argument("--cold-trajectories", type=int, default=16)
    ap.add_argument("--sequential", type=int, default=20)
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--budget-s", type=float, default=10.0)
    ap.add_argument("--modes", default="warm,cold")
    args = ap.parse_args()
    runs = []
    load_before = os.getloadavg()
    for mode in args.modes.split(","):
        n = args.trajectories if mode == "warm" else args.cold_trajectories
        runs.append(bench(mode, n, args.sequential if mode == "warm" else 4, args.pool, args.budget_s))
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
