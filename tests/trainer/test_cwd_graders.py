"""`rrl train`/`rrl eval` load a ``module:Class`` grader from a plain .py file in the working directory, as
``rrl grade`` and tools do (issue 47: only tools and ``rrl grade`` put the directory on sys.path; one shared
resolver now, ``graders.runtime.importable_from_cwd``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from graders.runtime import resolve_grader
from reasoning_rl.cli.common import prepare
from reasoning_rl.config import load_config

GRADER = (
    "from graders import Grade\n\n"
    "class Shout:\n"
    "    name = 'shout'\n"
    "    version = '1'\n"
    "    def grade(self, response, ground_truth, **options):\n"
    "        return Grade.correct('loud') if response == str(ground_truth).upper() else Grade.incorrect('quiet')\n"
)


@pytest.mark.parametrize(
    "override",
    [
        "data.default_grader=cwd_grader_a:Shout",
        "grading.rewards=[{grader: cwd_grader_b:Shout}]",
        "data.grader_map={loud: cwd_grader_c:Shout}",
    ],
)
def test_a_config_grader_loads_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: str
) -> None:
    module = override.split("=", 1)[1].split("cwd_grader_")[1][0]
    (tmp_path / f"cwd_grader_{module}.py").write_text(GRADER)
    monkeypatch.chdir(tmp_path)
    # as the `rrl` script runs: the working directory is not on sys.path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd(), str(tmp_path))])
    base = {
        "model": {"path": "m"},
        "data": {"train": {"path": "d.jsonl"}},
        "run": {"dir": str(tmp_path / "r")},
    }
    cfg = load_config(None, [override], base=base)
    prepare(cfg)
    assert resolve_grader(f"cwd_grader_{module}:Shout").grade("HI", "hi").verdict == "correct"
