"""Faults of a real 2-rank ``rrl train`` (tiny model, gloo, Ray actors): a SIGKILLed rank stops the run naming it
(before the collective timeout could) and ``trainer.resume=auto`` finishes the run; a SIGSTOPped (hung) rank stops it within
``collective_timeout_s`` plus a margin; impossible resource requests are one line with the fix and exit 2.

The rank's pid comes from the run's own log (``workers:`` lists every rank's node and pid), as a user would find
it. Each run starts its own local Ray instance (or joins one this test owns) and shuts it down."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.runs import REPO, STEPS, env, step_metrics, train, train_cmd, write_config

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

# Hang guards, not speed tests (CI: 2 loaded cores). A death is seen when it happens ("died" in the line), so
# its bound only has to stay under the default collective_timeout_s (600 s) that would otherwise end the run.
KILL_BOUND_S = 300.0
HANG_TIMEOUT_S = 20.0
HANG_MARGIN_S = 60.0  # the driver's wait runs from the call's start; closing the group and Ray take seconds
_PLACE = re.compile(r"rank (\d+) \(node (\S+), id \w+, pid (\d+)\)")


def _rank_pids(log: Path) -> dict[int, int]:
    return {int(m.group(1)): int(m.group(3)) for m in _PLACE.finditer(log.read_text(errors="replace"))}


def _start_and_wait_for_checkpoint(cfg: Path, run: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The run going, past its first checkpoint; returns it and rank 1's pid."""
    out = log.open("w")
    proc = subprocess.Popen(train_cmd(cfg), cwd=REPO, env=env(), stdout=out, stderr=subprocess.STDOUT)
    marker = run / "checkpoints" / "step_1" / "COMPLETE"
    deadline = time.time() + 300
    while not marker.exists():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail("no checkpoint within 300 s:\n" + log.read_text()[-3000:])
        time.sleep(0.05)
    pids = _rank_pids(log)
    assert sorted(pids) == [0, 1], log.read_text()[-3000:]
    return proc, pids[1]


def _wait(proc: subprocess.Popen[bytes], bound_s: float) -> float:
    start = time.monotonic()
    try:
        proc.wait(timeout=bound_s + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the run did not stop within {bound_s + 60:g} s of the fault")
    return time.monotonic() - start


def _error_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("error:")]
    assert len(lines) == 1, log.read_text()[
        -3000:
    ]  # (the ranks' own logs, forwarded by Ray, may hold tracebacks)
    return lines[0]


def test_killed_rank_stops_the_run_and_resume_finishes(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = write_config(tmp_path, tiny_model_dir, "kill", "grpo", ranks_per_node=2)
    run, log = tmp_path / "kill", tmp_path / "kill.log"
    proc, pid = _start_and_wait_for_checkpoint(cfg, run, log)
    os.kill(pid, signal.SIGKILL)
    took = _wait(proc, KILL_BOUND_S)
    print(f"killed rank: the run stopped {took:.1f} s after the SIGKILL")
    assert took < KILL_BOUND_S, f"stopped {took:.1f} s after the kill"
    assert proc.returncode == 1
    line = _error_line(log)
    print(line)
    assert "rank 1 stopped the run" in line and f"pid {pid}" in line and "died" in line, line
    assert "last good checkpoint" in line and "trainer.resume=auto" in line, line
    assert not (run / "checkpoints" / f"step_{STEPS}" / "COMPLETE").exists()  # it really stopped mid-run

    resumed = train(cfg, "trainer.resume=auto")
    assert "resum" in resumed.stdout.lower(), resumed.stdout[-2000:]
    assert [int(r["step"]) for r in step_metrics(run)] == list(range(1, STEPS + 1))
    assert (run / "checkpoints" / f"step_{STEPS}" / "COMPLETE").exists()


def test_hung_rank_is_stopped_within_the_collective_timeout(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = write_config(
        tmp_path, tiny_model_dir, "hang", "grpo", ranks_per_node=2, collective_timeout_s=HANG_TIMEOUT_S
    )
    run, log = tmp_path / "hang", tmp_path / "hang.log"
    proc, pid = _start_and_wait_for_checkpoint(cfg, run, log)
    os.kill(pid, signal.SIGSTOP)  # alive but silent: its peer waits in a collective, the driver on its call
    try:
        took = _wait(proc, HANG_TIMEOUT_S + HANG_MARGIN_S)
    finally:
        with_pid_gone = subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0
        if not with_pid_gone:
            os.kill(pid, signal.SIGKILL)
    print(
        f"hung rank: the run stopped {took:.1f} s after the SIGSTOP (collective_timeout_s={HANG_TIMEOUT_S:g})"
    )
    assert took < HANG_TIMEOUT_S + HANG_MARGIN_S, f"stopped {took:.1f} s after the hang"
    assert proc.returncode == 1
    line = _error_line(log)
    print(line)
    assert "rank 1 stopped the run" in line and f"pid {pid}" in line, line
    assert "last good checkpoint" in line, line


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def one_cpu_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    for key, value in env().items():
        monkeypatch.setenv(key, value)
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _refused(cfg: Path, *overrides: str) -> str:
    proc = subprocess.run(
        train_cmd(cfg, *overrides), cwd=REPO, env=env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


def test_bad_resource_requests_are_one_line_with_the_fix(
    tmp_path: Path, tiny_model_dir: Path, one_cpu_cluster: Any
) -> None:
    cfg = write_config(tmp_path, tiny_model_dir, "bad", "grpo", ranks_per_node=2)
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    line = _refused(cfg, f"resources.ray_address={address}")
    assert f"resources.ray_address='{address}'" in line and "ray start --head" in line, line
    assert time.monotonic() - start < 120  # Ray's own retry alone takes minutes on a dead address

    line = _refused(cfg, f"resources.ray_address={one_cpu_cluster.address}")  # 2 CPU ranks, 1 CPU
    assert "resources.ranks_per_node=2 CPU ranks need 2 CPUs" in line and "--num-cpus" in line, line
    line = _refused(cfg, f"resources.ray_address={one_cpu_cluster.address}", "resources.nodes=2")
    assert "resources.nodes=2" in line and "ray start --address" in line, line
    assert not (tmp_path / "bad" / "checkpoints" / "step_1").exists()
