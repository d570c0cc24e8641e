"""Recipe: verl's own GSM8K preprocessing output grades right with no option (issue 19, verl-compatible scoring).

The parquet is built the way verl's ``examples/data_preprocess/gsm8k.py`` builds it (HF ``datasets`` map over
question/answer rows, ``to_parquet``), from two GSM8K-style rows written here (no hub access).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import graders
from graders.runtime import GradeRequest, GradingPool
from reasoning_rl.cli.app import app
from reasoning_rl.config import DataConfig, SourceConfig
from reasoning_rl.data import load_examples

datasets = pytest.importorskip("datasets")

RAW = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72",
    },
    {
        "question": "A shop sells 1,200 pens a day. How many pens does it sell in 2 days?",
        "answer": "1,200 * 2 = 2,400\n#### 2,400",
    },
]
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def _verl_parquet(dest: Path) -> Path:
    """verl's gsm8k preprocessing, step for step: the same columns, nesting and types."""

    def extract_solution(solution_str: str) -> str:
        solution = re.search("#### (\\-?[0-9\\.\\,]+)", solution_str)
        assert solution is not None
        return solution.group(0).split("#### ")[1].replace(",", "")

    def process_fn(example: dict, idx: int) -> dict:
        question_raw = example.pop("question")
        answer_raw = example.pop("answer")
        return {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": question_raw + " " + INSTRUCTION}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": extract_solution(answer_raw)},
            "extra_info": {"split": "test", "index": idx, "answer": answer_raw, "question": question_raw},
        }

    ds = datasets.Dataset.from_list(RAW).map(function=process_fn, with_indices=True)
    ds.to_parquet(str(dest))
    return dest


RESPONSES = [
    ("She sold 24 in May, so 48 + 24 = 72 in all.\n#### 72", "correct"),
    ("48 + 24 = 71\n#### 71", "incorrect"),
    ("48 + 24 = 72, so the answer is \\boxed{72}.", "incorrect"),  # verl's strict rule wants ####
    ("#### 2,400", "correct"),  # row 2: commas dropped like verl
]


def test_rrl_grade_scores_a_verl_gsm8k_parquet_with_no_option(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(_verl_parquet(tmp_path / "test.parquet")).to_pylist()
    rows = [dict(table[0], response=r) for r, _ in RESPONSES[:3]] + [dict(table[1], response=RESPONSES[3][0])]
    src = tmp_path / "responses.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(app, ["grade", str(src), "-o", str(out), "--workers", "1", "--no-progress"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["grader"] for line in lines] == ["gsm8k"] * 4
    assert [line["verdict"] for line in lines] == [v for _, v in RESPONSES]


def test_trainer_data_loading_routes_verl_gsm8k_to_its_format(tmp_path: Path) -> None:
    path = _verl_parquet(tmp_path / "train.parquet")
    data = DataConfig(train=[SourceConfig(path=str(path))])
    examples = load_examples(data.train, data, seed=0, known_graders=frozenset(graders.available()))
    assert [ex.grader for ex in examples] == ["gsm8k", "gsm8k"]
    assert [ex.ground_truth for ex in examples] == ["72", "2400"]
    assert examples[0].messages[0]["content"].endswith(INSTRUCTION)
    requests = [GradeRequest(examples[0].grader, r, examples[0].ground_truth) for r, _ in RESPONSES[:3]]
    with GradingPool(workers=1, timeout_s=30) as pool:
        verdicts = [g.verdict for g in pool.grade_batch(requests)]
    assert verdicts == [v for _, v in RESPONSES[:3]]


def test_explicit_mapping_beats_the_known_source_default(tmp_path: Path) -> None:
    path = _verl_parquet(tmp_path / "train.parquet")
    data = DataConfig(train=[SourceConfig(path=str(path))], grader_map={"openai/gsm8k": "math"})
    examples = load_examples(data.train, data, seed=0)
    assert {ex.grader for ex in examples} == {"math"}


@pytest.mark.parametrize(
    "source", ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "aime_2024"]
)
def test_math_sets_default_to_the_boxed_math_grader(source: str) -> None:
    assert graders.known_source_grader(source) == "math"
    assert graders.known_source_grader("my_own_set") is None


def test_gsm8k_grader_follows_verl_strict_rule() -> None:
    g = graders.get("gsm8k")
    assert g.grade("#### 72", "72").verdict == "correct"
    assert g.grade("#### 72.0", "72").verdict == "correct"  # the math comparison, not verl's string equality
    assert g.grade("#### 12\nno wait\n#### 72", "72").verdict == "correct"  # the last one counts
    assert g.grade("####72", "72").verdict == "incorrect"  # verl's rule needs the space
    assert g.grade("#### 72" + " filler" * 60, "72").verdict == "incorrect"  # only the last 300 characters
    assert g.grade("<think>#### 5</think>#### 72", "72").verdict == "correct"
    assert g.grade("#### -3", "-3").verdict == "correct"
    assert g.grade("#### 72", "72", mode="lenient").verdict == "error"  # unknown option named


@pytest.mark.slow
def test_rrl_train_on_verl_gsm8k_parquet_grades_with_its_format_and_no_option(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A few CPU training steps on verl's parquet as it is: every sample goes to the gsm8k grader (the row's
    ``#### N`` rule), its verdict is that grader's on the same response and ground truth, and eval rows too."""
    from tests.trainer.test_cli_runs import hf_config
    from tests.trainer.test_train_e2e import metrics, train

    path = str(_verl_parquet(tmp_path / "train.parquet"))
    data = {"train": {"path": path}, "val": {"path": path}, "default_grader": "math"}  # the default
    cfg = hf_config(tmp_path, tiny_model_dir, "verl", data=data, trainer={"steps": 2})
    train(cfg)
    run = tmp_path / "verl"
    steps = [m for m in metrics(run) if "reward/mean" in m]
    assert len(steps) == 2 and all(m["grading/masked"] == 0 for m in steps)
    truths = {"72", "2400"}
    for step in (1, 2):
        rows = [json.loads(x) for x in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()]
        assert len(rows) == 8 and {r["grader"] for r in rows} == {"gsm8k"}
        assert {r["ground_truth"] for r in rows} <= truths
        assert all(r["prompt"][-1]["content"].endswith(INSTRUCTION) for r in rows)
        assert [r["verdict"] for r in rows] == [
            graders.grade("gsm8k", r["response"], r["ground_truth"]).verdict for r in rows
        ]
        m = steps[step - 1]
        assert m.get("grading/gsm8k/correct", 0) + m.get("grading/gsm8k/incorrect", 0) == 8
    evals = [json.loads(x) for x in (run / "eval" / "step_2.jsonl").read_text().splitlines()]
    assert {r["grader"] for r in evals} == {"gsm8k"} and {r["ground_truth"] for r in evals} == truths


@pytest.mark.parametrize(
    ("response", "verdict"),
    [("#### 72", "correct"), ("#### 72$", "correct"), ("#### $72", "incorrect"), ("#### 7,2", "correct")],
)
def test_gsm8k_reads_dollars_as_docs_verl_says(response: str, verdict: str) -> None:
    """docs/verl.md said `$` was dropped; the rule (verl's) never reads a `$` after `#### ` (issue 30)."""
    assert graders.grade("gsm8k", response, "72").verdict == verdict
    doc = (Path(__file__).resolve().parents[1] / "docs" / "verl.md").read_text()
    assert "`#### $72` has no answer" in doc and "`$` dropped" not in doc
