"""GradingPool on local worker processes: faults, retries, streaming, backpressure, cache, metrics."""

from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import runtime_test_graders as faulty

from graders.runtime import GradeRequest, GradingPool
from graders.runtime.procworker import PROGRESS_BYTES, read_progress

ECHO = f"{faulty.__name__}:EchoGrader"
SELFKILL = f"{faulty.__name__}:SelfKillingGrader"


@pytest.fixture(scope="module")
def pool() -> GradingPool:
    with GradingPool(workers=2, backend="process", timeout_s=1.0) as p:
        yield p


def test_batch_keeps_order_and_judges(pool: GradingPool) -> None:
    reqs = [GradeRequest(ECHO, str(i % 3), "1", id=i) for i in range(300)]
    grades = pool.grade_batch(reqs)
    assert [g.verdict for g in grades] == ["correct" if i % 3 == 1 else "incorrect" for i in range(300)]
    assert [g.details["answer"] for g in grades] == [str(i % 3) for i in range(300)]


def test_hung_grader_times_out_within_budget_and_pool_keeps_working(pool: GradingPool) -> None:
    start = time.monotonic()
    hung, ok, raised = pool.grade_batch(
        [
            GradeRequest(ECHO, "x", "x", {"hang": True}),
            GradeRequest(ECHO, "7", "7"),
            GradeRequest(ECHO, "7", "7", {"boom": True}),
        ]
    )
    elapsed = time.monotonic() - start
    assert hung.verdict == "error" and hung.reason.startswith("timeout")
    assert elapsed < pool.timeout_s + 60  # a hang guard (the grader never returns): the verdict is the check
    assert ok.verdict == "correct"
    assert raised.verdict == "error" and "boom on '7'" in raised.reason and "ValueError" in raised.reason
    after = pool.grade_batch([GradeRequest(ECHO, "1", "1")] * 20)
    assert all(g.verdict == "correct" for g in after)
    stats = pool.metrics()["graders"]["echo"]
    assert stats["timeouts"] >= 1 and stats["error_reasons"]["timeout"] >= 1
    assert stats["error_reasons"]["grader_exception"] >= 1


def test_hung_worker_with_large_queued_messages_does_not_stall_the_others(pool: GradingPool) -> None:
    big = "9" * 200_000  # several of these overflow a pipe buffer queued to the hung worker
    reqs = [GradeRequest(ECHO, "x", "x", {"hang": True})] + [
        GradeRequest(ECHO, big, big, id=i) for i in range(40)
    ]
    start = time.monotonic()
    grades = pool.grade_batch(reqs)
    assert time.monotonic() - start < pool.timeout_s + 60  # a hang guard: the verdicts are the check
    assert grades[0].reason.startswith("timeout")
    assert all(g.verdict == "correct" for g in grades[1:])


def test_worker_sigkilled_mid_batch_every_sample_gets_exactly_one_result(tmp_path: Path) -> None:
    """The first 10 grades pass, the rest wait at a gate the test opens only after it SIGKILLed a worker that
    has graded (and holds or queues gated grades): the kill lands mid-batch by construction, however loaded the
    box."""
    n, gate = 200, tmp_path / "gate"
    options = {"gate": str(gate), "gate_from": 10}
    # 60 s: a hang guard (a held grade must not time out while the test kills)
    with GradingPool(workers=2, backend="process", timeout_s=60.0, retries=2) as pool:
        for i in range(n):
            pool.submit(GradeRequest(ECHO, str(i), str(i), options, id=i))
        seen: list[int] = []
        deadline = time.monotonic() + 60  # a hang guard: the ungated grades take milliseconds
        busy: list[int] = []
        while not busy:
            assert time.monotonic() < deadline, "no worker graded any of the 10 ungated samples"
            seen += [req.id for req, grade in pool.poll(0.01) if grade.verdict == "correct"]
            busy = [w["pid"] for w in pool.metrics()["workers"] if w["ready"] and w["graded"] >= 1]
        os.kill(busy[0], signal.SIGKILL)
        gate.touch()
        seen += [req.id for req, grade in pool.results() if grade.verdict == "correct"]
        metrics = pool.metrics()
    # exactly one result each, none lost, none duplicated, all "correct": the grade the killed worker held (if
    # any) was re-run, and its queued tasks went elsewhere
    assert sorted(seen) == list(range(n))
    assert metrics["worker_restarts"] >= 1


def test_worker_death_is_retried_then_reported_as_error(tmp_path: Path) -> None:
    with GradingPool(workers=1, backend="process", retries=1) as pool:
        assert pool.grade_batch([GradeRequest(SELFKILL, "a", None, {"marker": str(tmp_path / "m1")})])[
            0
        ].verdict == ("correct")
    with GradingPool(workers=1, backend="process", retries=0) as pool:
        (lost,) = pool.grade_batch([GradeRequest(SELFKILL, "a", None, {"marker": str(tmp_path / "m2")})])
    assert lost.verdict == "error" and lost.reason.startswith("worker_lost")


def test_grader_marked_retryable_errors_are_retried(pool: GradingPool, tmp_path: Path) -> None:
    (grade,) = pool.grade_batch([GradeRequest(ECHO, "1", "1", {"flaky_marker": str(tmp_path / "f")})])
    assert grade.verdict == "correct"
    assert pool.metrics()["graders"]["echo"]["retries"] >= 1


def test_grader_warm_hook_runs_outside_the_budget() -> None:
    with GradingPool(workers=1, backend="process", timeout_s=1.0) as pool:
        (grade,) = pool.grade_batch([GradeRequest(f"{faulty.__name__}:SlowStartGrader", "a", "a")])
    assert grade.verdict == "correct"  # the 1.5 s start-up ran in warm(), not in the 1 s grade budget


def test_unknown_grader_is_a_per_sample_error(pool: GradingPool) -> None:
    bad, good = pool.grade_batch([GradeRequest("no-such-grader", "1", "1"), GradeRequest(ECHO, "1", "1")])
    assert bad.verdict == "error" and "unknown grader 'no-such-grader'" in bad.reason
    assert good.verdict == "correct"


def test_submit_blocks_at_max_in_flight() -> None:
    with GradingPool(workers=1, backend="process", max_in_flight=2, timeout_s=5.0) as pool:
        pool.grade_batch([GradeRequest(ECHO, "w", "w")])  # warm the worker
        start = time.monotonic()
        for i in range(3):
            pool.submit(GradeRequest(ECHO, "1", "1", {"sleep_s": 0.3}, id=i))
        blocked_for = time.monotonic() - start
        assert pool.metrics()["in_flight"] <= 2
        assert sorted(req.id for req, _ in pool.results()) == [0, 1, 2]
    assert blocked_for >= 0.25  # the third submit waited for the first grade to finish


def test_stream_of_20000_samples_keeps_parent_memory_flat() -> None:
    proc = psutil.Process()
    received = 0
    rss_at_2k = 0
    with GradingPool(workers=2, backend="process", max_in_flight=256) as pool:
        for i in range(20_000):
            pool.submit(GradeRequest(ECHO, str(i), str(i), id=i))
            if i % 64 == 0:
                received += len(pool.poll(0))
            if i == 2_000:
                rss_at_2k = proc.memory_info().rss
        received += sum(1 for _ in pool.results())
        rss_end = proc.memory_info().rss
        count = pool.metrics()["graders"]["echo"]["count"]
    assert received == 20_000 and count == 20_000
    assert rss_end - rss_at_2k < 20 * 2**20, f"parent RSS grew {(rss_end - rss_at_2k) / 2**20:.1f} MiB"


def test_progress_page_never_shows_a_start_in_the_past() -> None:
    """A worker publishes its running task and start time on a shared page up to thousands of times a
    second while the supervisor reads it to enforce budgets. A read racing a write must never see a start
    earlier than the real one: it once saw 0.0 (``struct.pack_into`` zero-fills first) and killed healthy
    workers for "timeouts"."""
    # The writer stores until the reader has seen enough of its stores (a flag byte past the progress fields),
    # not for a fixed second: a starved reader on a loaded box still gets its reads. 300 s: a hang guard only.
    writer = (
        "import mmap, sys, time\n"
        "from graders.runtime.procworker import PROGRESS_BYTES, _Progress\n"
        "page = mmap.mmap(int(sys.argv[1]), PROGRESS_BYTES + 1)\n"
        "progress = _Progress(page)\n"
        "end = time.monotonic() + 300\n"
        "while page[PROGRESS_BYTES] == 0 and time.monotonic() < end:\n"
        "    progress.mark(7, time.monotonic())\n"
    )
    with tempfile.TemporaryFile() as page_file:
        page_file.truncate(PROGRESS_BYTES + 1)
        page = mmap.mmap(page_file.fileno(), PROGRESS_BYTES + 1)
        begin = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", writer, str(page_file.fileno())], pass_fds=(page_file.fileno(),)
        )
        reads = bad = 0
        while proc.poll() is None:
            seq, started = read_progress(page)
            if seq == 7:
                reads += 1
                bad += started < begin
            if reads == 100_000:
                page[PROGRESS_BYTES] = 1  # enough: the writer stops
        page.close()
    assert proc.returncode == 0
    assert reads >= 100_000, "the writer stopped before the reader saw its stores"
    assert bad == 0, f"{bad} of {reads} reads saw a start before the writer began"


def test_cache_hits_skip_work_and_errors_are_not_cached(tmp_path: Path) -> None:
    cache = tmp_path / "grades.sqlite"
    reqs = [GradeRequest(ECHO, str(i % 2), "1", id=i) for i in range(50)]
    boom = GradeRequest(ECHO, "1", "1", {"boom": True})
    with GradingPool(workers=1, backend="process", cache_path=cache) as pool:
        first = pool.grade_batch([*reqs, boom])
    with GradingPool(workers=1, backend="process", cache_path=cache) as pool:
        second = pool.grade_batch([*reqs, boom])
        stats = pool.metrics()["graders"]["echo"]
    assert second == first
    assert stats["cache_hits"] == 50  # the error was graded again, not replayed from the cache
    assert stats["cache_hit_rate"] == pytest.approx(50 / 51)


def test_metrics_shape(pool: GradingPool) -> None:
    pool.grade_batch([GradeRequest(ECHO, "1", "1")] * 10)
    m = pool.metrics()
    echo = m["graders"]["echo"]
    assert set(echo) >= {
        "count",
        "verdicts",
        "error_reasons",
        "latency_ms",
        "timeouts",
        "retries",
        "cache_hits",
    }
    assert set(echo["latency_ms"]) >= {"p50", "p95", "p99"}
    assert echo["latency_ms"]["p50"] <= echo["latency_ms"]["p99"]
    assert m["backend"] == "process" and m["queue_depth"] == 0 and m["in_flight"] == 0
    assert sum(m["nodes"].values()) == sum(s["count"] - s["cache_hits"] for s in m["graders"].values()) - sum(
        s["error_reasons"].get("unknown_grader", 0) for s in m["graders"].values()
    )
