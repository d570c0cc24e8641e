"""Acceptance (issue 48): `rrl train` (GRPO, tiny model, plain-transformers engine) with a judge behind the math
grader as a fallback, `grading.rewards: [{grader: math}, {grader: <judge>, fallback: true}]`, trains 3 steps;
the judge (the scripted one, in the grading workers) is asked exactly for the responses math found no answer in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import graders
from graders.compose import no_answer
from graders.selftest import golden_cases
from tests.graders.model_grader_fakes import ScriptedJudge
from tests.trainer.test_cli_runs import hf_config
from tests.trainer.test_train_e2e import metrics, train

pytestmark = pytest.mark.slow
JUDGE = "tests.graders.model_grader_fakes:ScriptedJudge"


def _samples(run: Path) -> list[dict]:
    return [
        json.loads(x)
        for step in (1, 2, 3)
        for x in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()
    ]


def test_grpo_trains_with_a_fallback_judge(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = hf_config(
        tmp_path,
        tiny_model_dir,
        "fallback",
        grading={
            "rewards": [
                {"grader": "math", "weight": 1.0},
                {"grader": JUDGE, "name": "judge", "fallback": True},
            ]
        },
        data={"val": {"generator": "fixed_digit", "size": 3}},
        trainer={"steps": 3},
    )
    proc = train(cfg)
    assert "scripted_judge" in proc.stdout + proc.stderr  # its golden cases ran before step 1
    run = tmp_path / "fallback"
    steps = [m for m in metrics(run) if "reward/mean" in m]
    assert [m["step"] for m in steps] == [1, 2, 3]
    asked = 0
    for step in (1, 2, 3):
        rows = [json.loads(x) for x in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        assert rows
        for s in rows:
            math = graders.grade("math", s["response"], s["ground_truth"])
            parts = s["rewards"]
            assert parts["math"]["verdict"] == math.verdict
            if no_answer(math):
                asked += 1
                judged = ScriptedJudge().grade(
                    s["response"],
                    s["ground_truth"],
                    context=graders.GradeContext.from_messages(s["prompt"]),
                )
                assert parts["judge"]["verdict"] == judged.verdict == s["verdict"]
                assert s["reward"] == pytest.approx(judged.score)
            else:
                assert "judge" not in parts and s["verdict"] == math.verdict
    assert asked  # the random policy leaves answers out: the fallback was exercised
    # the judge's latency and grade count reach the trace and `rrl report`'s grader table
    from reasoning_rl.report import analyze, load_run

    by_name = {g.grader: g for g in analyze(load_run(run)).graders}
    golden = {
        name: len(golden_cases(graders.get(name) if name == "math" else ScriptedJudge())[0])
        for name in ("math", "judge")
    }
    assert by_name["scripted_judge"].reported_count == asked + golden["judge"]  # the pre-run selftest too
    assert {"p50", "p95", "p99", "max"} <= set(by_name["scripted_judge"].reported_ms)
    assert by_name["math"].reported_count == len(_samples(run)) + golden["math"]
    # evaluation (the same grading path as `rrl eval`) composes the same way
    evals = [json.loads(x) for x in (run / "eval" / "step_3.jsonl").read_text().splitlines()]
    assert len(evals) == 3
    for row in evals:
        for r in row["responses"]:
            math = graders.grade("math", r["text"], row["ground_truth"])
            assert ("judge" in r["rewards"]) == no_answer(math)
