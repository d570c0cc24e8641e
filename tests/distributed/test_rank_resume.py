"""A 2-rank run killed (SIGKILL of the driver, at a named point) after a checkpoint resumes with
``trainer.resume=auto``: at 2 ranks it continues as if never stopped, at 1 rank within the 1-vs-2-rank tolerance
(sharded checkpoints, resharded by torch.distributed.checkpoint to the loading run's world size). The runs join a
one-node Ray cluster the test owns, so the killed driver's actors are reaped by Ray and nothing outlives the
test."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.runs import (
    REPO,
    assert_same_run,
    env,
    final_weights,
    one_node_cluster,
    step_metrics,
    train,
    train_cmd,
    write_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture
def one_node(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from one_node_cluster(monkeypatch, env())


def _kill_writing_second_checkpoint(cfg: Path, run: Path, log: Path) -> None:
    """The driver SIGKILLs itself (``RRL_FAULT``) writing step 2's checkpoint: step 1's is the one to resume,
    by construction rather than by how fast the test saw step 1's marker."""
    with log.open("w") as out:
        proc = subprocess.run(
            train_cmd(cfg),
            cwd=REPO,
            env={**env(), "RRL_FAULT": "checkpoint:2"},
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    assert proc.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    assert "RRL_FAULT: SIGKILL at checkpoint #2" in log.read_text()
    done = sorted(p.parent.name for p in (run / "checkpoints").glob("step_*/COMPLETE"))
    assert done == ["step_1"], done  # killed mid-run


def test_killed_two_rank_run_resumes(
    one_node: Any, runs: Callable[[str, int], Path], tmp_path: Path, tiny_model_dir: Path
) -> None:
    cfg = write_config(
        tmp_path, tiny_model_dir, "killed", "grpo", ranks_per_node=2, ray_address=one_node.address
    )
    run = tmp_path / "killed"
    _kill_writing_second_checkpoint(cfg, run, tmp_path / "killed.log")
    copy = tmp_path / "killed-1r"
    shutil.copytree(run, copy)
    reference = runs("grpo", 2)

    train(cfg, "trainer.resume=auto")  # 2 ranks again: exactly the uninterrupted run
    assert_same_run(run, reference)
    want, got = step_metrics(reference), step_metrics(run)
    assert [r["policy/loss"] for r in got] == [r["policy/loss"] for r in want]
    wa, wb = final_weights(run), final_weights(reference)
    assert all(bool((wa[k] == wb[k]).all()) for k in wb)

    cfg1 = write_config(tmp_path, tiny_model_dir, "killed-1r", "grpo", ranks_per_node=1)
    train(cfg1, "trainer.resume=auto")  # 1 rank in-process: the trajectory continues within tolerance
    assert_same_run(copy, reference)
