"""A golden-case file that cannot be read (not UTF-8, JSON nested too deeply, an integer too long) is a one-line
error naming the file and line from `rrl graders selftest`, never a traceback (issue 28)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

GRADER = """from graders.types import Grade


class Grader:
    name = "bad_cases"
    version = "1"
    selftest_file = "cases.jsonl"

    def grade(self, response, ground_truth, **options):
        return Grade.correct()
"""
GOOD = b'{"response": "a", "ground_truth": "a", "verdict": "correct"}\n'


@pytest.mark.parametrize(
    ("cases", "needle"),
    [(GOOD + b'{"response": "caf\xe9", "ground_truth": "a", "verdict": "correct"}\n',
      "rrl_bad_cases/cases.jsonl line 2: not UTF-8 (byte 0xe9 at offset"),
     (GOOD + b"[" * 5000 + b"\n", "rrl_bad_cases/cases.jsonl line 2 is nested deeper than 100 levels"),
     (b'{"response": "a", "ground_truth": ' + b"9" * 5000 + b', "verdict": "correct"}\n',
      "rrl_bad_cases/cases.jsonl line 1 holds an integer of 5000 digits")],
)  # fmt: skip
def test_unreadable_golden_cases_are_a_one_line_error(tmp_path: Path, cases: bytes, needle: str) -> None:
    package = tmp_path / "rrl_bad_cases"
    package.mkdir()
    (package / "__init__.py").write_text(GRADER)
    (package / "cases.jsonl").write_bytes(cases)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    proc = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "graders", "selftest", "rrl_bad_cases:Grader"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(proc.stderr.strip().splitlines()) <= 3, proc.stderr
