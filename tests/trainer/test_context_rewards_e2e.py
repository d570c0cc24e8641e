"""Acceptance (issue 19), `rrl train` on the tiny model with the plain-transformers engine: a grader reading the
row (prompt + extra_info) and a composed correctness + format reward, each trained on for a few CPU steps,
with the per-component metrics and sample rows checked against the graders themselves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.test_cli_runs import hf_config
from tests.trainer.test_train_e2e import metrics, train

pytestmark = pytest.mark.slow


def samples(run: Path, step: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()]


def test_a_grader_reading_prompt_and_extra_info_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    rows = []
    for i in range(8):
        question = f"Write the digit {i}"
        rows.append(
            {
                "id": f"r{i}",
                "question": question,
                "answer": "-",
                "extra_info": {"target": i, "question": question},
            }
        )
    data = tmp_path / "digits.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = hf_config(
        tmp_path,
        tiny_model_dir,
        "ctx",
        data={
            "train": {"path": str(data)},
            "default_grader": "task_graders:TargetFromContext",
            "prompt_template": "{question}",
        },
        trainer={"steps": 3},
    )
    train(cfg)
    run = tmp_path / "ctx"
    lines = metrics(run)
    steps = [m for m in lines if "reward/mean" in m]
    assert [m["step"] for m in steps] == [1, 2, 3]
    # the grader returns an error whenever the prompt it got is not its row's: none was masked
    assert all(m["grading/masked"] == 0 for m in steps)
    targets = {r["id"]: str(r["extra_info"]["target"]) for r in rows}
    for step in (1, 2, 3):
        got = samples(run, step)
        assert got and all(s["grader"] == "target_from_context" for s in got)
        assert [s["verdict"] for s in got] == [
            "correct" if targets[s["id"]] in s["response"] else "incorrect" for s in got
        ]
        mean = sum(s["score"] for s in got) / len(got)
        assert steps[step - 1]["reward/mean"] == pytest.approx(mean)


def test_a_composed_correctness_and_format_reward_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    import graders

    cfg = hf_config(
        tmp_path,
        tiny_model_dir,
        "composed",
        data={"val": {"generator": "fixed_digit", "size": 3}},
        grading={
            "rewards": [
                {"grader": "task_graders:ContainsAnswer", "name": "correct", "weight": 1.0},
                {"grader": "format", "weight": 0.5},
            ]
        },
        trainer={"steps": 3},
    )
    proc = train(cfg)
    assert "format 1.0.0" in proc.stdout + proc.stderr  # its golden cases ran before step 1
    run = tmp_path / "composed"
    steps = [m for m in metrics(run) if "reward/mean" in m]
    assert len(steps) == 3
    for m in steps:
        assert {"reward/correct/mean", "reward/format/mean"} <= set(m)
        expected = 1.0 * m["reward/correct/mean"] + 0.5 * m["reward/format/mean"]
        assert m["reward/mean"] == pytest.approx(expected)
    for step in (1, 2, 3):
        for s in samples(run, step):
            parts = s["rewards"]
            assert set(parts) == {"correct", "format"}
            assert parts["correct"]["score"] == float(str(s["ground_truth"]) in s["response"])
            assert parts["format"]["verdict"] == graders.grade("format", s["response"], None).verdict
            assert s["reward"] == pytest.approx(parts["correct"]["score"] + 0.5 * parts["format"]["score"])
            assert s["verdict"] == parts["correct"]["verdict"]  # the first component's verdict
    evals = [json.loads(x) for x in (run / "eval" / "step_3.jsonl").read_text().splitlines()]
    assert len(evals) == 3
    for row in evals:
        for r in row["responses"]:
            assert (
                set(r["rewards"]) == {"correct", "format"}
                and r["verdict"] == r["rewards"]["correct"]["verdict"]
            )
        assert row["mean_score"] == sum(r["rewards"]["correct"]["score"] for r in row["responses"]) / len(
            row["responses"]
        )
