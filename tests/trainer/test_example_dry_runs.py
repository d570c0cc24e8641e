"""Every example config passes `rrl train CONFIG --dry-run` (issue 47: model, LoRA targets, data, graders, tools,
resources, memory plan) on the tiny model, so CI notices when a key an example uses is renamed or refused. The
model path is the only override: the examples name hub models (or `make demo`'s conversion) that CI lacks; the
1.5B- and 7B-shape examples' plans for their real shapes are in their READMEs (a 2-core CI box cannot fit them,
and its dry run says so). In-process (one import for all of them); the LoRA one also in a subprocess, as a user
runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reasoning_rl.cli.app import app

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "examples").glob("*/config.yaml"))
# The dry run builds each example's tool set: math_tir's python tool opens its Docker sandbox pool.
NEEDS_DOCKER = {"math_tir"}
runner = CliRunner()


def _param(path: Path) -> object:
    marks = [pytest.mark.docker] if path.parent.name in NEEDS_DOCKER else []
    return pytest.param(path, id=path.parent.name, marks=marks)


def test_every_example_dir_is_dry_run_here() -> None:
    names = {p.parent.name for p in CONFIGS}
    assert {"lora_grpo", "continuous_grpo", "qwen15_grpo", "qwen7b_lora"} <= names
    assert {"trl_reward_function", "verl_compute_score"} <= names


@pytest.mark.parametrize("path", [_param(p) for p in CONFIGS])
def test_example_dry_run(
    path: Path, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    run_dir = tmp_path / "run"
    args = ["train", str(path.relative_to(REPO)), "--dry-run", f"model.path={tiny_model_dir}"]
    res = runner.invoke(app, [*args, "run.doctor=false", f"run.dir={run_dir}"])
    assert res.exit_code == 0, res.output
    assert "memory plan: " in res.output and "dry run ok" in res.output
    assert not run_dir.exists()  # nothing was written


def test_lora_example_dry_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "reasoning_rl.cli", "train", "examples/lora_grpo/config.yaml", "--dry-run"]
    cmd += [f"model.path={tiny_model_dir}", "run.doctor=false", f"run.dir={tmp_path / 'run'}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "lora: target_modules=" in proc.stdout and "dry run ok" in proc.stdout
    assert not (tmp_path / "run").exists()  # nothing was written
