"""Redirected output stays readable (issue 30 item 10: progress bars, Ray's banner and 80-column wrapping in a log
file): with stdout/stderr not a terminal, no progress bars and no Ray usage banner; a terminal keeps them.
Failed on main 5090d93."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reasoning_rl.cli.app import app
from reasoning_rl.cli.common import REDIRECTED_ENV, prepare
from reasoning_rl.config import load_config

KEYS = tuple(REDIRECTED_ENV)


def _cfg():
    return load_config(None, base={"model": {"path": "m"}, "data": {"train": {"generator": "arithmetic"}}})


def test_a_redirected_run_turns_progress_bars_and_the_ray_banner_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    prepare(_cfg())
    assert {k: os.environ.get(k) for k in ("TQDM_DISABLE", "RAY_USAGE_STATS_ENABLED")} == {
        "TQDM_DISABLE": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    assert os.environ.get("HF_DATASETS_DISABLE_PROGRESS_BARS") == "1"


def test_a_terminal_keeps_them_and_a_users_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    prepare(_cfg())
    assert os.environ.get("TQDM_DISABLE") is None and os.environ.get("RAY_USAGE_STATS_ENABLED") is None
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    monkeypatch.setenv("TQDM_DISABLE", "0")
    prepare(_cfg())
    assert os.environ["TQDM_DISABLE"] == "0"


def test_rrl_grade_draws_no_progress_bar_into_a_log(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"response": "\\boxed{4}", "ground_truth": "4"}) + "\n")
    res = CliRunner().invoke(app, ["grade", str(src), "-o", str(tmp_path / "out.jsonl"), "--grader", "math"])
    assert res.exit_code == 0, res.output
    assert "responses/s" not in res.stderr and "ETA" not in res.stderr, res.stderr
