"""examples/lora_grpo (issue 47): the LoRA example passes `rrl train --dry-run` (model, data, graders, memory
plan) on the tiny model, so CI notices when a key it uses is renamed or refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_lora_example_dry_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "reasoning_rl.cli", "train", "examples/lora_grpo/config.yaml", "--dry-run"]
    cmd += [f"model.path={tiny_model_dir}", "run.doctor=false", f"run.dir={tmp_path / 'run'}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "dry run ok" in proc.stdout
    assert not (tmp_path / "run").exists()  # nothing was written
