"""The hard per-grade budget: it holds from threads (no SIGALRM), kills runaway SymPy, and recovers."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from graders import Grade
from graders.math import MathGrader

BLOW_UP = "\\boxed{(x+y+z+w)^{40}}"  # passes every pre-guard; SymPy's expansion runs for minutes
BUDGET_S = 1.0
THREADS = 3
BOMB_BUDGET_S = 5.0  # the blow-up beside honest grades (they take ~0.03 s in all): they must finish inside it
MARGIN_S = 30.0  # a hang guard (unbounded, these run for minutes), never a speed test: CI has 2 loaded cores


@pytest.fixture(scope="module")
def grader() -> MathGrader:
    g = MathGrader(max_workers=THREADS)
    g.pool.warm(THREADS)
    return g


def _timed(grader: MathGrader, response: str, gold: str, budget_s: float = BUDGET_S) -> tuple[Grade, float]:
    start = time.monotonic()
    result = grader.grade(response, gold, timeout_s=budget_s)
    return result, time.monotonic() - start


def test_budget_holds_for_concurrent_blow_ups_from_threads(grader: MathGrader) -> None:
    assert threading.current_thread() is threading.main_thread()
    with ThreadPoolExecutor(max_workers=THREADS) as executor:
        futures = [executor.submit(_timed, grader, BLOW_UP, "5") for _ in range(THREADS)]
        results = [f.result(timeout=60) for f in futures]
    for result, elapsed in results:
        assert (result.verdict, result.reason) == ("incorrect", "timeout")
        assert elapsed < BUDGET_S + MARGIN_S, elapsed


def test_normal_grades_are_unaffected_by_a_concurrent_blow_up(grader: MathGrader) -> None:
    """The honest grades all finish while the blow-up still runs (the order of events is the check, not a
    duration): the blow-up's budget is ~200x what the 24 honest grades take, theirs a hang guard."""
    grader.pool.warm(THREADS)
    with ThreadPoolExecutor(max_workers=3) as executor:
        bomb = executor.submit(_timed, grader, BLOW_UP, "5", BOMB_BUDGET_S)
        normal = [
            executor.submit(_timed, grader, "\\boxed{\\sqrt{8}}", "2\\sqrt{2}", MARGIN_S) for _ in range(4)
        ]
        fast = [executor.submit(_timed, grader, "\\boxed{1,234}", "1234", MARGIN_S) for _ in range(20)]
        assert all(f.result(timeout=120)[0].verdict == "correct" for f in normal + fast)
        assert not bomb.done(), "the honest grades waited for the blow-up"
        assert bomb.result(timeout=120)[0].reason == "timeout"


def test_killed_workers_are_reaped_and_replaced(grader: MathGrader) -> None:
    grader.pool.warm(THREADS)
    before = {p.pid for p in psutil.Process().children()}
    result, _ = _timed(grader, BLOW_UP, "5")
    assert result.reason == "timeout"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the replacement starts in the background
        children = [p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE]
        if len(children) == len(before) and {p.pid for p in children} != before:
            break
        time.sleep(0.2)
    children = [p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE]
    assert len(children) == len(before), "the killed worker was not replaced one-for-one"
    assert grader.grade("\\boxed{\\frac{\\pi}{2}}", "\\pi/2", timeout_s=30).verdict == "correct"


def test_workers_have_an_address_space_limit(grader: MathGrader) -> None:
    import resource

    from graders.math.worker import MEMORY_LIMIT_BYTES

    grader.pool.warm(THREADS)
    pids = [w.proc.pid for w in grader.pool._idle]
    assert pids
    for pid in pids:
        soft, _hard = resource.prlimit(pid, resource.RLIMIT_AS)
        assert soft == MEMORY_LIMIT_BYTES


_FORKED: list[MathGrader] = []  # reaches the forked child by memory copy (a grader does not pickle)


def _grade_in_forked_child() -> str:
    return _FORKED[0].grade("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", timeout_s=30).verdict


def test_a_forked_child_gets_its_own_workers(grader: MathGrader) -> None:
    import multiprocessing

    grader.pool.warm(THREADS)
    parent_workers = list(grader.pool._idle)
    _FORKED[:] = [grader]
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_grade_in_forked_child) == "correct"
    # the parent's workers were neither used nor disturbed by the child
    assert all(w.proc.poll() is None for w in parent_workers)
    assert grader.grade("\\boxed{\\sqrt{8}}", "2\\sqrt{2}", timeout_s=30).verdict == "correct"
