"""`rrl grade` with the model-backed graders (issue 48), end to end on tiny random models: the reward model's
scores, the cache replaying them on a regrade, the judge's errors (a random judge writes no verdict) and a
judge that does (the scripted one) through `--grader module:Class`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reasoning_rl.cli.app import app

pytestmark = pytest.mark.slow
runner = CliRunner()


def _rows(tmp_path: Path) -> Path:
    rows = [
        {"id": "a", "prompt": "What is 3 + 4?", "responses": ["7", "3 + 4 = 8"], "ground_truth": "7"},
        {"id": "b", "prompt": "What is 2 + 2?", "response": "4", "ground_truth": "4"},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _grade(rows: Path, out: Path, *args: str) -> tuple[int, list[dict], str]:
    res = runner.invoke(
        app, ["grade", str(rows), "-o", str(out), "--workers", "1", "--timeout", "300", *args]
    )
    lines = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return res.exit_code, lines, res.output


def test_grade_with_a_reward_model_and_regrade_from_cache(tmp_path: Path) -> None:
    from reasoning_rl.tiny import build_tiny_reward_model

    model = build_tiny_reward_model(tmp_path / "rm")
    rows, out = _rows(tmp_path), tmp_path / "out.jsonl"
    args = ("--grader", "reward_model", "--option", f"reward_model.path={model}")
    code, lines, output = _grade(rows, out, *args)
    assert code == 0, output
    grades = [g for line in lines for g in line["grades"]]
    assert len(grades) == 3 and all(g["verdict"] in ("correct", "incorrect") for g in grades)
    assert all(0.0 <= g["score"] <= 1.0 and "logit" in g["details"] for g in grades)
    code, again, output = _grade(rows, out, *args, "--overwrite")
    assert code == 0 and "3 grades replayed from cache" in " ".join(output.split()), output
    assert [line["grades"] for line in again] == [line["grades"] for line in lines]


def test_grade_with_a_random_judge_is_all_errors_never_scores(tmp_path: Path, tiny_model_dir: Path) -> None:
    rows, out = _rows(tmp_path), tmp_path / "out.jsonl"
    code, lines, output = _grade(
        rows,
        out,
        "--grader",
        "judge",
        "--option",
        f"judge.path={tiny_model_dir}",
        "--option",
        "judge.max_new_tokens=4",
    )
    assert code == 1 and "every row" in output  # a random model writes no verdict: the judge's failure
    grades = [g for line in lines for g in line["grades"]]
    assert len(grades) == 3
    assert all(
        g["verdict"] == "error" and g["reason"].startswith(("judge_budget", "judge_unparseable"))
        for g in grades
    )


def test_grade_with_a_judge_that_answers(tmp_path: Path) -> None:
    rows, out = _rows(tmp_path), tmp_path / "out.jsonl"
    code, lines, output = _grade(rows, out, "--grader", "tests.graders.model_grader_fakes:ScriptedJudge")
    assert code == 0, output
    assert [[g["verdict"] for g in line["grades"]] for line in lines] == [
        ["correct", "incorrect"],
        ["correct"],
    ]
