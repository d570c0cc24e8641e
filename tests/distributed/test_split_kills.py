"""Split placement survives SIGKILLs (issue 43): a continuous run on 1 training + 1 rollout rank over Ray
(``rollout.max_lag=1``, the rollout rank decoding during the update) has its driver SIGKILLed at each of the
five named points of ``rrl_testutil.KILLS`` in turn (mid-checkpoint, mid-generation, mid-update,
mid-hand-off and mid-hand-off of a resume's own weight load; on split placement the hand-off point is the
driver's, once the broadcast is issued), each run resuming the last with ``trainer.resume=auto``, then runs to
the end. It proves:

- each kill happened at the point it names (the driver's exit status and its fault line);
- no rank actor and no process of a killed run outlives it: the runs join a one-node Ray cluster the test owns,
  which reaps a dead driver's actors (their pids, from the driver's log), and every process started with the
  killed run's environment (the driver's children: grading workers) is gone;
- no token lags the trainer by more than 1 and no prompt is lost or trained twice across the kills, the
  checkpoint's unfinished samples resubmitted (``lossless``).
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rrl_testutil import KILLS, bounded_lag, latest_checkpoint, lossless, still_alive

from tests.distributed.runs import REPO, env, train, train_cmd, write_config

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

MAX_LAG, BATCH, N, STEPS = 1, 2, 4, 5
MARK = "RRL_KILLED_RUN"  # set in each killed driver's environment: finds the processes it started
SHAPE = (
    "rollout.engine=hf",
    f"rollout.max_lag={MAX_LAG}",
    f"rollout.n={N}",
    "rollout.max_tokens=8",
    f"trainer.batch_size={BATCH}",
    f"trainer.steps={STEPS}",
    "trainer.keep_checkpoints=2",
    "data.train.size=32",
)


@pytest.fixture
def one_node(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A one-node Ray cluster started with the runs' environment (not a driver's ``RRL_FAULT``: only the
    driver dies), which reaps the actors of a driver that died."""
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    for key, value in env().items():
        monkeypatch.setenv(key, value)
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False}
    )
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _started_by(tag: str) -> list[int]:
    """Pids of the live processes whose environment carries ``MARK=tag``."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # another user's process, or gone meanwhile
    return found


def _kill_at(cfg: Path, fault: str, log: Path) -> None:
    """The driver SIGKILLs itself at ``fault`` (``RRL_FAULT``), resuming the run's last checkpoint; fails unless
    it died there and nothing of the run outlived it."""
    tag = f"{log}:{fault}"
    with log.open("w") as out:
        proc = subprocess.run(
            train_cmd(cfg, *SHAPE, "trainer.resume=auto"),
            cwd=REPO,
            env={**env(), "RRL_FAULT": fault, MARK: tag},
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
    text = log.read_text()
    phase, nth = fault.split(":")
    assert proc.returncode == -signal.SIGKILL, text[-3000:]
    assert f"RRL_FAULT: SIGKILL at {phase} #{nth}" in text, text[-3000:]  # there, not elsewhere
    ranks = [int(pid) for pid in re.findall(r"rank \d+ \(node .*, pid (\d+)\)", text)]
    assert len(ranks) == 2, text[-3000:]  # the training rank and the rollout rank
    assert still_alive(ranks) == [], f"{fault}: rank actors outlived the killed driver"
    assert still_alive(_started_by(tag)) == [], f"{fault}: processes of the killed driver outlived it"


def test_split_run_killed_at_every_point_resumes_losslessly(
    one_node: Any, tmp_path: Path, tiny_model_dir: Path
) -> None:
    cfg = write_config(
        tmp_path,
        tiny_model_dir,
        "split",
        "grpo",
        ranks_per_node=2,
        placement="split",
        rollout_ranks=1,
        ray_address=one_node.address,
    )
    run = tmp_path / "split"
    latest: list[int | None] = []
    for i, fault in enumerate(KILLS):
        _kill_at(cfg, fault, tmp_path / f"kill{i}.log")
        latest.append(latest_checkpoint(run))
    assert latest[0] is not None and latest == sorted(latest), latest  # a checkpoint survived every kill
    resumed = latest_checkpoint(run)
    assert resumed is not None and resumed < STEPS

    out = train(cfg, *SHAPE, "trainer.resume=auto")
    assert "continuous rollouts on 1 rollout rank(s) of their own" in out.stdout
    assert f"(step {resumed})" in out.stdout
    bounded_lag(run, STEPS, BATCH * N, MAX_LAG)
    rows = lossless(run, STEPS, BATCH)
    assert all(r["staleness/lag_max"] <= MAX_LAG for r in rows)
