"""Shared runs for the trainer's end-to-end tests: one process where several tests only read the same run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.trainer.test_train_e2e import config, train, train_cmd

UNINTERRUPTED_STEPS = 6


@pytest.fixture(scope="session")
def uninterrupted(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """An uninterrupted 6-step vLLM run of ``test_train_e2e.config``'s defaults, checkpointed every step (a
    checkpoint changes nothing in the trajectory): the reference the killed and the interrupted runs resume to
    (their steps 3 and 6), and the quiet engine log. Its run dir and finished process (stdout, stderr)."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    trainer = {
        "steps": UNINTERRUPTED_STEPS,
        "batch_size": 4,
        "checkpoint_every": 1,
        "checkpoint_minutes": 0,
        "keep_checkpoints": UNINTERRUPTED_STEPS,
    }
    proc = train(config(tmp, tiny_model_dir, "full", trainer=trainer))
    return tmp / "full", proc


@pytest.fixture(scope="session")
def moved_two_step_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A 2-step hf-engine run checkpointed every step, trained from a copy of the tiny model that is deleted
    after it: only the checkpoints' own files can serve. Tests copy it (each to its own dir) before exporting
    or evaluating it, which writes into the run dir; one training process for test_eval_run_dir and
    test_hub_push."""
    from tests.trainer.test_cli_runs import hf_config, ok, run

    tmp = tmp_path_factory.mktemp("two_step_run")
    model = tmp / "base"
    shutil.copytree(tiny_model_dir, model)
    ok(run(train_cmd(hf_config(tmp, model, "shared", trainer={"steps": 2, "checkpoint_every": 1}))))
    shutil.rmtree(model)
    return tmp / "shared"
