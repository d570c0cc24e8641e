"""Grading runtime under hostile or buggy graders (issue 15): results that cannot travel, processes that
escape the worker, leaking workers, garbage on the result channel. Each test fails on the old runtime."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import runtime_test_graders as faulty
from rrl_testutil import still_alive

from graders.runtime import GradeRequest, GradingPool, local
from graders.types import Grade

ECHO = f"{faulty.__name__}:EchoGrader"
POISON = f"{faulty.__name__}:PoisonGrader"
SPAWNING = f"{faulty.__name__}:SpawningGrader"
LEAKING = f"{faulty.__name__}:LeakingGrader"
WRITER = f"{faulty.__name__}:ChannelWriterGrader"


def _grade_within(pool: GradingPool, reqs: list[GradeRequest], budget_s: float) -> list[Grade]:
    """grade_batch, failing the test (instead of hanging it) when it does not return in time: the old
    runtime livelocked on some of these."""
    out: list[list[Grade]] = []
    thread = threading.Thread(target=lambda: out.append(pool.grade_batch(reqs)), daemon=True)
    thread.start()
    thread.join(budget_s)
    assert out, f"grade_batch did not return within {budget_s:g}s (livelock)"
    return out[0]


def _read_pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


# -- results that cannot travel back ------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["lambda", "unloadable"])
def test_details_that_do_not_pickle_are_a_bad_return_error(kind: str) -> None:
    reqs = [GradeRequest(POISON, "x", None, {"kind": kind})] + [GradeRequest(POISON, "y", None)] * 20
    with GradingPool(workers=1, backend="process", timeout_s=5.0) as pool:
        grades = _grade_within(pool, reqs, 60)
        restarts = pool.metrics()["worker_restarts"]
    assert grades[0].verdict == "error" and grades[0].reason.startswith("bad_return"), grades[0]
    assert "pickle" in grades[0].reason
    assert all(g.verdict == "correct" for g in grades[1:])
    assert restarts == 0  # caught in the worker: nobody died


def test_worker_dying_while_sending_results_charges_attempts_and_ends() -> None:
    """A finished grade that kills its worker on the way back (after the grade, when no task is running)
    used to be requeued without counting an attempt, forever. Now every task the dead worker started and
    did not report is charged; retried tasks run alone, so the innocent ones pass on their retry."""
    poison = GradeRequest(POISON, "x", None, {"kind": "kills_in_send"})
    reqs = [GradeRequest(POISON, str(i), None) for i in range(10)] + [poison]
    reqs += [GradeRequest(POISON, str(i), None) for i in range(10, 20)]
    with GradingPool(workers=2, backend="process", timeout_s=5.0, retries=1) as pool:
        grades = _grade_within(pool, reqs, 90)
        again = pool.grade_batch([GradeRequest(POISON, "z", None)] * 5)
    assert grades[10].verdict == "error" and grades[10].reason.startswith("worker_lost"), grades[10]
    assert "2 attempts" in grades[10].reason
    assert [g.verdict for i, g in enumerate(grades) if i != 10] == ["correct"] * 20
    assert all(g.verdict == "correct" for g in again)


# -- processes that escape the worker's process group -------------------------------------------------
def test_timed_out_worker_takes_its_setsid_children_and_daemons(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    with GradingPool(workers=1, backend="process", timeout_s=3.0) as pool:
        (grade,) = pool.grade_batch(
            [GradeRequest(SPAWNING, "x", None, {"pid_file": str(pid_file), "hang": 1})]
        )
        assert grade.reason.startswith("timeout")
        spawned = _read_pids(pid_file)
        assert len(spawned) == 2
        assert still_alive(spawned) == []  # gone while the pool still runs, not only at close


@pytest.mark.slow
def test_externally_killed_worker_takes_its_descendants(tmp_path: Path) -> None:
    """SIGKILL from outside (OOM killer, an operator): the worker's SymPy helper (own session) and a
    plugin's setsid children must not be left running with parent pid 1."""
    pid_file = tmp_path / "pids"
    with GradingPool(workers=1, backend="process", timeout_s=30.0) as pool:
        (math_grade,) = pool.grade_batch([GradeRequest("math", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}")])
        assert math_grade.verdict == "correct"
        (spawn_grade,) = pool.grade_batch([GradeRequest(SPAWNING, "x", None, {"pid_file": str(pid_file)})])
        worker = spawn_grade.details["pid"]
        below = [p.pid for p in psutil.Process(worker).children(recursive=True)]
        spawned = _read_pids(pid_file)  # the daemon is not below the worker: it was re-parented already
        assert len(spawned) == 2 and below  # the SymPy helper and the setsid child at least
        os.kill(worker, signal.SIGKILL)
        assert still_alive([worker, *below, *spawned]) == []
        after = pool.grade_batch([GradeRequest(ECHO, "1", "1")])
        assert after[0].verdict == "correct"


def test_close_leaves_no_process_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    with GradingPool(workers=2, backend="process", timeout_s=30.0) as pool:
        grades = pool.grade_batch(
            [GradeRequest(SPAWNING, str(i), None, {"pid_file": str(pid_file)}) for i in range(4)]
        )
        assert all(g.verdict == "correct" for g in grades)
        # a worker still starting has no pid yet (None: psutil would read that as this very process)
        workers = [w["pid"] for w in pool.metrics()["workers"] if w["pid"] is not None]
        tree = [p.pid for w in workers for p in psutil.Process(w).children(recursive=True)]
    assert still_alive([*workers, *tree, *_read_pids(pid_file)]) == []


# -- memory bound --------------------------------------------------------------------------------------
def test_leaking_worker_is_recycled_at_its_rss_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    reqs = [GradeRequest(LEAKING, str(i), None, {"mb": 40}) for i in range(12)]
    # the cap is checked after a grade at most every RSS_CHECK_S; 0: after every grade, so 12 fast grades cannot
    # all fall inside one interval (a clock race; sleeping the interval between grades cost 3 s)
    monkeypatch.setattr(local, "RSS_CHECK_S", 0.0)
    with GradingPool(workers=1, backend="process", timeout_s=10.0, max_worker_rss_mb=300) as pool:
        grades = []
        for r in reqs:  # one at a time: the cap is checked between grades
            grades.append(pool.grade_batch([r])[0])
        metrics = pool.metrics()
    assert all(g.verdict == "correct" for g in grades)
    assert metrics["workers_recycled"] >= 1
    assert len({g.details["pid"] for g in grades}) >= 2
    assert metrics["worker_restarts"] == 0  # recycling is not a failure


def test_worker_is_recycled_after_max_grades() -> None:
    with GradingPool(workers=1, backend="process", max_grades_per_worker=10) as pool:
        grades = pool.grade_batch([GradeRequest(LEAKING, str(i), None) for i in range(35)])
        metrics = pool.metrics()
    assert all(g.verdict == "correct" for g in grades)
    by_pid: dict[int, int] = {}
    for g in grades:
        by_pid[g.details["pid"]] = by_pid.get(g.details["pid"], 0) + 1
    assert len(by_pid) >= 4 and max(by_pid.values()) <= 10
    assert metrics["workers_recycled"] >= 3


def test_worker_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_worker_rss_mb"):
        GradingPool(workers=1, backend="process", max_worker_rss_mb=0)
    with pytest.raises(ValueError, match="max_grades_per_worker"):
        GradingPool(workers=1, backend="process", max_grades_per_worker=0)


# -- the result channel --------------------------------------------------------------------------------
def test_garbage_on_the_result_channel_fails_only_that_task() -> None:
    reqs = [GradeRequest(ECHO, str(i), str(i)) for i in range(30)]
    reqs.insert(15, GradeRequest(WRITER, "g", None, {"garbage": True}))
    with GradingPool(workers=2, backend="process", timeout_s=5.0, retries=1) as pool:
        grades = _grade_within(pool, reqs, 90)
        again = pool.grade_batch([GradeRequest(ECHO, "1", "1")] * 10)
    # the writer's garbage may land in its own worker's channel or in the other's (both are reachable
    # from inside a worker only if the runtime leaks them): either way at most the writer fails
    innocent = [g for i, g in enumerate(grades) if i != 15]
    assert all(g.verdict == "correct" for g in innocent), [
        g.reason for g in innocent if g.verdict != "correct"
    ]
    assert grades[15].verdict in ("correct", "error")
    assert all(g.verdict == "correct" for g in again)


def test_grader_stdout_never_reaches_the_callers_stdout() -> None:
    code = (
        "from graders.runtime import GradeRequest, GradingPool\n"
        f"with GradingPool(workers=1, backend='process') as pool:\n"
        f"    g = pool.grade_batch([GradeRequest({WRITER!r}, 'x', None)])[0]\n"
        "print('verdict', g.verdict)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "verdict correct\n"
    assert "grader chatter on stdout" in out.stderr


# -- warm sandbox containers of a killed worker --------------------------------------------------------
@pytest.mark.docker
@pytest.mark.slow
def test_timed_out_workers_warm_containers_are_removed(tmp_path: Path) -> None:
    import sandboxes
    from sandboxes.docker_backend import LABEL, client

    def owned_by(pid: str) -> list[dict[str, object]]:  # low-level list: no inspect that races removals
        return list(client().api.containers(all=True, filters={"label": f"{LABEL}.pid={pid}"}))

    ok, why = sandboxes.check("docker")
    if not ok:
        pytest.fail(f"docker sandbox unusable: {why} (run scripts/services.sh)")
    pid_file = tmp_path / "pid"
    docker_user = f"{faulty.__name__}:DockerGrader"
    with GradingPool(workers=1, backend="process", timeout_s=30.0) as pool:
        (warm,) = pool.grade_batch([GradeRequest(docker_user, "w", None, {"pid_file": str(pid_file)})])
        assert warm.verdict == "correct", warm  # the sandbox is up: the next grade hangs at once
        (grade,) = pool.grade_batch(
            [GradeRequest(docker_user, "x", None, {"pid_file": str(pid_file), "hang": 1})]
        )
        assert grade.reason.startswith("timeout")
        worker = pid_file.read_text()
        deadline = time.monotonic() + 30
        while owned_by(worker):
            assert time.monotonic() < deadline, "the killed worker's containers are still there"
            time.sleep(0.2)
        # and one killed at close, busy with a grade
        pid_file.unlink()
        pool.submit(GradeRequest(docker_user, "y", None, {"pid_file": str(pid_file), "hang": 1}))
        while not pid_file.exists():
            time.sleep(0.1)
        worker = pid_file.read_text()
    assert not owned_by(worker)
