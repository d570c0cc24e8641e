"""A tool run on the frontier survives SIGKILLs (issue 43): the run of ``test_continuous_e2e`` killed at its five
named points, with ``rollout.tools`` (the scripted TIR policy and the deterministic arithmetic tool) at
``max_lag = 1``. Unfinished tool trajectories in a checkpoint restart from their prompts with their seeds, so
every drawn prompt is trained once (none lost, none twice), every token's lag stays within 1, and the resumed
run's samples are exactly those of the same run never killed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import test_train_e2e
from rrl_testutil import bounded_lag, kill_at_every_point, lossless
from test_train_e2e import REPO, config, env

pytestmark = [pytest.mark.slow]

TOOLS = REPO / "tests" / "tools"  # tir_engine (rollout.engine=scripted_tir) and arith_tool
BATCH, N, STEPS = 2, 4, 6
ROLLOUT = {
    "engine": "scripted_tir",
    "n": N,
    "max_tokens": 160,
    "max_lag": 1,
    "freshness_check": False,
    "tools": ["arith_tool:ArithTool"],
    "tool_format": "hermes",
    "max_turns": 2,
}


def _env() -> dict[str, str]:
    base = env()
    return {**base, "PYTHONPATH": f"{TOOLS}:{base['PYTHONPATH']}"}


def _cmd(cfg: Path, *overrides: str) -> list[str]:
    """``rrl train`` with the scripted TIR engine registered first."""
    boot = "import tir_engine; from reasoning_rl.cli.app import app; app()"
    return [sys.executable, "-c", boot, "train", str(cfg), *overrides]


def _train(cfg: Path, *overrides: str) -> None:
    proc = subprocess.run(
        _cmd(cfg, *overrides), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _samples(run: Path) -> dict[int, list[Any]]:
    return {
        step: sorted(
            (r["id"], r["sample"], r["response"], r["verdict"])
            for r in map(json.loads, (run / "samples" / f"step_{step}.jsonl").read_text().splitlines())
        )
        for step in range(1, STEPS + 1)
    }


def test_tool_run_survives_kills_lossless(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(test_train_e2e, "train_cmd", _cmd)  # what kill_at runs
    monkeypatch.setattr(test_train_e2e, "env", _env)
    sections: dict[str, Any] = {
        "data": {"train": {"generator": "arithmetic", "size": 32}, "chat_template": False},
        "trainer": {"steps": STEPS, "batch_size": BATCH, "checkpoint_every": 1, "keep_checkpoints": 2},
        "rollout": ROLLOUT,
        "grading": {"selftest": False},
    }
    reference = config(tmp_path, tiny_model_dir, "ref", **sections)
    _train(reference)
    cfg = config(tmp_path, tiny_model_dir, "killed", **sections)
    run = tmp_path / "killed"
    kill_at_every_point(
        run, STEPS, lambda _, fault: test_train_e2e.kill_at(cfg, fault, "trainer.resume=auto")
    )
    _train(cfg, "trainer.resume=auto")
    bounded_lag(run, STEPS, BATCH * N, 1)
    lossless(run, STEPS, BATCH)
    assert _samples(run) == _samples(tmp_path / "ref")  # restarted trajectories sampled what they would have
