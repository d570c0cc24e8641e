"""Grading runtime benchmark: math grading throughput with 1 vs 2 workers, and per-sample runtime overhead.

Workload: the 800 Qwen2.5-Math responses in ../shared/acceptance/math/qwen25math_cot_100.jsonl (synthetic
boxed answers when ../shared is absent), graded by the ``math`` grader with the cache off.
- direct: ``MathGrader.grade`` called in this process, one after another (the floor).
- pool-1 / pool-2: ``GradingPool(workers=N).grade_batch`` on warm workers, runs alternating between the two
  pools (startup excluded, measured apart).
Targets: pool-2 / pool-1 throughput >= 1.7x on 2 cores; pool-1 per-sample time - direct <= 2 ms.
Writes bench/out/grading_runtime.json.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from contextlib import ExitStack
from pathlib import Path

from graders.runtime import GradeRequest, GradingPool
from graders.runtime.request import resolve_grader
from graders.types import Grade

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "acceptance" / "math" / "qwen25math_cot_100.jsonl"
OUT = REPO / "bench" / "out" / "grading_runtime.json"
REPEATS = 5
MIN_SAMPLES = 8000  # the 800 responses repeated: most grade in ~0.1 ms, so fewer would time mostly noise


def workload() -> tuple[list[GradeRequest], str]:
    if SHARED.exists():
        reqs = []
        for line in SHARED.read_text().splitlines():
            row = json.loads(line)
            reqs += [GradeRequest("math", r, row["gt"]) for r in row["code"]]
        return reqs, str(SHARED.relative_to(REPO.parent))
    reqs = [
        GradeRequest("math", f"so the answer is \\boxed{{\\frac{{{i}}}{{{i + 1}}}}}", f"{i}/{i + 1}")
        for i in range(800)
    ]
    return reqs, "synthetic boxed fractions (../shared absent)"


def direct(reqs: list[GradeRequest]) -> float:
    grader = resolve_grader("math")
    start = time.perf_counter()
    for r in reqs:
        grader.grade(r.response, r.ground_truth, **r.options)
    return time.perf_counter() - start


def pooled(reqs: list[GradeRequest]) -> tuple[dict[int, float], dict[int, float]]:
    """Median batch seconds with 1 and with 2 workers, and each pool's start-up to warm.

    Both pools stay up and their runs alternate, so a change in the machine's background load during the
    measurement hits both alike instead of skewing the ratio (an idle pool's workers block on their pipes).
    """
    runs: dict[int, list[float]] = {1: [], 2: []}
    startup: dict[int, float] = {}
    with ExitStack() as stack:
        pools: dict[int, GradingPool] = {}
        for workers in (1, 2):
            start = time.perf_counter()
            pool = stack.enter_context(GradingPool(workers=workers, backend="process", timeout_s=30.0))
            pool.grade_batch(reqs[:50])  # warms the workers (grader imported, SymPy helpers up)
            while not all(w["ready"] for w in pool.metrics()["workers"]):
                time.sleep(0.05)
            startup[workers] = time.perf_counter() - start
            pool.grade_batch(reqs)  # one full pass so every worker has seen the whole workload's code paths
            pools[workers] = pool
        for _ in range(REPEATS):
            for workers, pool in pools.items():
                t0 = time.perf_counter()
                grades = pool.grade_batch(reqs)
                runs[workers].append(time.perf_counter() - t0)
                assert len(grades) == len(reqs)
    return {w: statistics.median(r) for w, r in runs.items()}, startup


class NoopGrader:
    """Does nothing: pool time per sample with it is pure runtime cost (IPC, bookkeeping)."""

    name = "noop"
    version = "1"

    def grade(self, response: str, ground_truth: object, **options: object) -> Grade:
        return Grade.correct()


def unpipelined_latency_ms(reqs: list[GradeRequest]) -> tuple[float, float]:
    """Median round trip of single-request batches (no prefetch to hide IPC) vs the same grade called directly."""
    grader = resolve_grader("math")
    sample = reqs[:: max(1, len(reqs) // 200)]
    direct_ms = []
    for r in sample:
        t0 = time.perf_counter()
        grader.grade(r.response, r.ground_truth)
        direct_ms.append(1000 * (time.perf_counter() - t0))
    pooled_ms = []
    with GradingPool(workers=1, backend="process", timeout_s=30.0) as pool:
        pool.grade_batch(reqs)
        for r in sample:
            t0 = time.perf_counter()
            pool.grade_batch([r])
            pooled_ms.append(1000 * (time.perf_counter() - t0))
    return statistics.median(direct_ms), statistics.median(pooled_ms)


def noop_ms_per_sample(n: int) -> float:
    reqs = [GradeRequest(f"{Path(__file__).stem}:NoopGrader", str(i), str(i)) for i in range(n)]
    with GradingPool(workers=1, backend="process") as pool:
        pool.grade_batch(reqs[:100])
        t0 = time.perf_counter()
        pool.grade_batch(reqs)
        return 1000 * (time.perf_counter() - t0) / n


def main() -> None:
    reqs, source = workload()
    reqs = reqs * max(1, -(-MIN_SAMPLES // len(reqs)))
    n = len(reqs)
    direct(reqs)  # warm-up: imports, SymPy helper processes
    t_direct = statistics.median(direct(reqs) for _ in range(REPEATS))
    medians, startup = pooled(reqs)
    (t1, t2), (start1, start2) = (medians[1], medians[2]), (startup[1], startup[2])
    per_direct_ms, per1_ms, per2_ms = (1000 * t / n for t in (t_direct, t1, t2))
    single_direct_ms, single_pool_ms = unpipelined_latency_ms(reqs)
    noop_ms = noop_ms_per_sample(5000)
    result = {
        "workload": source,
        "samples": n,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "direct_ms_per_sample": per_direct_ms,
        "pool1_ms_per_sample": per1_ms,
        "pool2_ms_per_sample": per2_ms,
        "throughput_per_s": {"direct": n / t_direct, "pool1": n / t1, "pool2": n / t2},
        "speedup_2_vs_1_workers": t1 / t2,
        "overhead_ms_per_sample": per1_ms - per_direct_ms,
        "single_request_latency_ms": {
            "direct": single_direct_ms,
            "pool": single_pool_ms,
            "overhead": single_pool_ms - single_direct_ms,
        },
        "noop_grader_pool_ms_per_sample": noop_ms,
        "pool_startup_s": {"workers1": start1, "workers2": start2},
        "targets": {"speedup_2_vs_1_workers": ">= 1.7", "overhead_ms_per_sample": "<= 2.0"},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    rows = [
        ("direct (in-process)", per_direct_ms, n / t_direct, "-"),
        ("GradingPool 1 worker", per1_ms, n / t1, f"{t_direct / t1:.2f}x direct"),
        ("GradingPool 2 workers", per2_ms, n / t2, f"{t1 / t2:.2f}x 1 worker (target >= 1.7)"),
    ]
    print(f"grading runtime bench: {n} math grades ({source}, repeated), cache off, median of {REPEATS}")
    print(f"{'mode':<24}{'ms/sample':>10}{'samples/s':>11}  ratio")
    for name, ms, rate, ratio in rows:
        print(f"{name:<24}{ms:>10.3f}{rate:>11.1f}  {ratio}")
    print(
        f"per-sample runtime overhead (pool 1 worker - direct): {per1_ms - per_direct_ms:.3f} ms (target <= 2 ms)"
    )
    print(
        f"single request, no pipelining (median): direct {single_direct_ms:.3f} ms, pool {single_pool_ms:.3f} ms,"
        f" overhead {single_pool_ms - single_direct_ms:.3f} ms"
    )
    print(f"no-op grader through the pool (pure runtime cost): {noop_ms:.3f} ms/sample")
    print(
        f"pool startup to warm: 1 worker {start1:.2f}s, 2 workers {start2:.2f}s; wrote {OUT.relative_to(REPO)}"
    )


if __name__ == "__main__":
    main()
