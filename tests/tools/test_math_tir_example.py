"""examples/math_tir as a user runs it (issue 30 item 1): the real SmolLM2-135M on vLLM (CPU in CI) writes
```python blocks that the Docker sandbox runs, and ``--dry-run`` shows the instruction that makes it do so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SMOKE = ["trainer.steps=2", "trainer.batch_size=4", "rollout.n=4"]


def test_math_tir_smoke_shape_makes_tool_calls(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    from reasoning_rl.policy.model import smollm2_hf_dir

    model = smollm2_hf_dir()  # the config's .cache/smollm2-135m-instruct, converted once
    cmd = [sys.executable, "-m", "reasoning_rl.cli", "train", "examples/math_tir/config.yaml", *SMOKE]
    extra = [f"model.path={model}", f"run.dir={tmp_path / 'tir'}", "trainer.checkpoint_every=0"]
    extra += ["trainer.export=false", "logging.console=plain", "logging.tensorboard=false", "run.seed=0"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    dry = subprocess.run(
        [*cmd, *extra, "--dry-run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert "Write a Python program that prints the answer." in dry.stdout  # the rendered instruction
    assert "```python code block" in dry.stdout
    run = subprocess.run([*cmd, *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "tir" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "tools/calls_per_sample" in r]
    assert len(steps) == 2
    calls = [r["tools/calls_per_sample"] * r["samples"] for r in steps]
    print(f"tool calls per step: {calls}; step seconds: {[round(r['time/step_s']) for r in steps]}")
    assert sum(calls) >= 1, steps
