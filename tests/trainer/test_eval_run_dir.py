"""``rrl eval --model RUN_DIR --step N`` from another directory, after the run directory moved (issue 19)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.trainer.test_cli_runs import ok, run, user_error

pytestmark = pytest.mark.slow


def test_eval_a_moved_run_dir_by_step_from_anywhere(tmp_path: Path, moved_two_step_run: Path) -> None:
    """The run (``moved_two_step_run``): 2 steps from a base model deleted since, copied here to a dir it never
    ran in."""
    moved = tmp_path / "elsewhere" / "moved"
    shutil.copytree(moved_two_step_run, moved)
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"question": f"Say {i}", "answer": "7"}) + "\n" for i in range(3)))
    out = tmp_path / "res.jsonl"
    cwd = tmp_path / "somewhere"
    cwd.mkdir()
    cli = [sys.executable, "-m", "reasoning_rl.cli", "eval"]
    proc = ok(
        run(
            [
                *cli,
                "--model",
                str(moved),
                "--step",
                "1",
                "--data",
                str(data),
                "--n",
                "2",
                "-o",
                str(out),
                "rollout.engine=hf",
                "rollout.max_tokens=4",
                "eval.temperature=1.0",
                "run.doctor=false",
                f"run.dir={tmp_path / 'ev'}",
                "data.default_grader=task_graders:ContainsAnswer",
            ],
            cwd=cwd,
        )
    )
    assert (moved / "export" / "step_1" / "config.json").is_file()
    assert not (moved / "export" / "step_2").exists()  # only the step asked for
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["responses"]) == 2 for r in rows)
    assert "pass@2" in proc.stdout
    err = user_error(run([*cli, "--model", str(moved), "--step", "9", "--data", str(data)], cwd=cwd))
    assert "no complete checkpoint for step 9" in err and "[1, 2]" in err
    err = user_error(
        run([*cli, "--model", str(data.parent / "q.jsonl"), "--step", "1", "--data", str(data)], cwd=cwd)
    )
    assert "--model must be a run directory" in err
