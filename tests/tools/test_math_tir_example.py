"""examples/math_tir as a user runs it (issue 30 item 1, issue 33's TIR recipe): the real SmolLM2-135M on vLLM
(CPU in CI) writes ```python blocks that the Docker sandbox runs, ``--dry-run`` shows the instruction that makes
it do so, ``rrl eval`` of the same config evaluates with the tool on, and the config trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SMOKE = [
    "trainer.steps=2",
    "trainer.batch_size=2",
    "rollout.n=4",
    "rollout.max_tokens=256",
    "rollout.turn_max_tokens=192",
]


def test_math_tir_smoke_shape_makes_tool_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    from typer.testing import CliRunner

    from reasoning_rl.cli.app import app
    from reasoning_rl.policy.model import smollm2_hf_dir

    model = smollm2_hf_dir()  # the config's .cache/smollm2-135m-instruct, converted once
    args = ["train", "examples/math_tir/config.yaml", *SMOKE]
    extra = [f"model.path={model}", f"run.dir={tmp_path / 'tir'}", "trainer.checkpoint_every=0"]
    extra += ["trainer.export=false", "logging.console=plain", "logging.tensorboard=false", "run.seed=0"]
    # the dry run in this process (the CLI's own entry point; a process of its own cost ~10 s of imports),
    # as test_example_dry_runs runs every example's, here with the real model's chat template
    monkeypatch.chdir(REPO)
    dry = CliRunner().invoke(app, [*args, *extra, "--dry-run"])
    assert dry.exit_code == 0, dry.output[-3000:]
    assert "Write a Python program that prints the answer." in dry.output  # the rendered instruction
    assert "```python code block" in dry.output
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    cmd = [sys.executable, "-m", "reasoning_rl.cli", *args, *extra]
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "tir" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "tools/calls_per_sample" in r]
    assert len(steps) == 2
    calls = [r["tools/calls_per_sample"] * r["samples"] for r in steps]
    print(f"tool calls per step: {calls}; step seconds: {[round(r['time/step_s']) for r in steps]}")
    assert sum(calls) >= 1, steps


def test_math_tir_config_evaluates_with_the_tool_on(tmp_path: Path) -> None:
    """`rrl eval` of the same config (the recipe for evaluating a TIR-style model): every prompt is a tool rollout,
    the per-prompt results carry each response's tool turns, and the eval table is printed."""
    pytest.importorskip("vllm")
    from reasoning_rl.policy.model import smollm2_hf_dir

    out = tmp_path / "eval.jsonl"
    cmd = [sys.executable, "-m", "reasoning_rl.cli", "eval", "examples/math_tir/config.yaml", "-o", str(out)]
    cmd += [f"model.path={smollm2_hf_dir()}", f"run.dir={tmp_path / 'ev'}", "eval.max_prompts=3", "eval.n=2"]
    cmd += ["eval.temperature=1.0", "logging.console=plain", "run.seed=0"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["responses"]) == 2 for r in rows)
    responses = [resp for r in rows for resp in r["responses"]]
    assert all("tool_calls" in resp and "trained_tokens" in resp for resp in responses)  # tool rollouts
    calls = sum(resp["tool_calls"] for resp in responses)
    print(f"eval: {calls} tool calls in {len(responses)} responses")
    assert calls >= 1, responses[0]
    assert "mean_score" in done.stdout and "pass@2" in done.stdout
