"""One pass@k / maj@k implementation: ``rrl eval`` (trainer/eval.py) and ``rrl grade`` report identical numbers
for the same responses (issue 16; they used to vote with different answer keys and average differently)."""

from __future__ import annotations

import json
from pathlib import Path

import eval_parity_graders
import pytest
from typer.testing import CliRunner

from graders.runtime import GradeRequest, GradingPool
from reasoning_rl.cli.app import app
from reasoning_rl.config import GradingConfig
from reasoning_rl.data import Example
from reasoning_rl.rollout import Completion
from reasoning_rl.trainer.collect import RewardPlan, Sample
from reasoning_rl.trainer.eval import equivalence, summarise

PROMPTS = [  # (data_source, ground truth, 3 responses)
    ("alg", "\\frac{1}{2}", ["\\boxed{3}", "\\boxed{0.5}", "\\boxed{\\frac12}"]),  # maj by equivalence only
    ("alg", "7", ["\\boxed{7}", "no box here", "\\boxed{8}"]),
    ("geo", "2", ["\\boxed{2}", "\\boxed{2}", "\\boxed{3}"]),
    ("geo", "10", ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"]),
]


ERROR_PROMPTS = [  # errors count as not correct in accuracy and pass@k, and do not vote in maj@k
    ("a", "1", ["1", "ERR", "2"]),
    ("a", "1", ["ERR", "ERR", "ERR"]),
    ("b", "5", ["6", "5", "5"]),
]


@pytest.mark.parametrize(
    ("grader", "prompts"),
    [("math", PROMPTS), (f"{eval_parity_graders.__name__}:EchoOrError", ERROR_PROMPTS)],
    ids=["math", "errors"],
)
def test_rrl_eval_and_rrl_grade_report_identical_numbers(tmp_path: Path, grader: str, prompts: list) -> None:
    src, out, summary = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "summary.json"
    src.write_text(
        "".join(
            json.dumps({"data_source": s, "ground_truth": gt, "responses": rs}) + "\n"
            for s, gt, rs in prompts
        )
    )
    res = CliRunner().invoke(
        app,
        [
            "grade",
            str(src),
            "-o",
            str(out),
            "--grader",
            grader,
            "--no-progress",
            "--no-cache",
            "--workers",
            "1",
            "--summary-json",
            str(summary),
        ],
    )
    assert res.exit_code == 0, res.output
    graded = json.loads(summary.read_text())["summary"]

    samples: list[Sample] = []
    with GradingPool(workers=1) as pool:
        for group, (source, gt, responses) in enumerate(prompts):
            ex = Example(
                uid=f"p{group}",
                data_source=source,
                messages=({"role": "user", "content": "q"},),
                ground_truth=gt,
                grader=grader,
            )
            grades = pool.grade_batch([GradeRequest(grader, r, gt) for r in responses])
            samples += [
                Sample(group, ex, Completion(group, i, [1], [2], [0.0], r, "stop"), g)
                for i, (r, g) in enumerate(zip(responses, grades, strict=True))
            ]
        result = summarise(samples, 3, equivalence(pool, samples, RewardPlan(GradingConfig())))

    rates = [k for k in graded["overall"] if k.startswith(("mean_score", "pass@", "maj@"))]
    assert {"mean_score", "pass@1", "pass@3", "maj@3"} <= set(rates)
    for key in rates:
        assert result.metrics[f"eval/{key}"] == graded["overall"][key], key
        for source in {s for s, _, _ in prompts}:
            assert result.by_source[source][key] == graded["by_source"][source][key], (source, key)
    assert result.metrics["eval/errors"] == graded["overall"]["verdicts"].get("error", 0)
    if grader == "math":
        # alg 1: 0.5 = 1/2 outvotes 3; alg 2: 7 ties 8 (no box: no vote), first wins; geo 1: 2; geo 2: wrong
        assert graded["overall"]["maj@3"] == 0.75
    else:
        assert graded["overall"]["mean_score"] == pytest.approx(3 / 9)  # 3 correct of 9, errors not correct
        assert graded["overall"]["maj@3"] == pytest.approx(2 / 3)  # the all-error row has no correct majority
