"""Rows in GSM8K's own schema (issue 47): ``answer`` is the worked solution ending in ``#### N``.

Taken whole as the gold, every right answer graded ``incorrect`` (``--grader math`` 0.40 on five correct
rows, ``--grader gsm8k`` 0.00), in ``rrl train``/``eval`` and ``rrl grade`` alike, without a word. Every loader
now takes the number after ``####`` (one function, ``graders.gsm8k_rows.gsm8k_gold``) and says so in one line;
a GSM8K-shaped gold with no number to take refuses its row naming the recipe; and a prose gold the math
grader cannot read is ``error``, never ``incorrect``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import graders
from graders.gsm8k_rows import GSM8K_RECIPE, NotAGold, gsm8k_gold
from reasoning_rl.cli.app import app
from reasoning_rl.config import DataConfig, SourceConfig
from reasoning_rl.data import DataError, LoadReport, load_examples

# The first five rows of GSM8K's test split, as openai/gsm8k ships them (question, answer).
ROWS = [
    {
        "question": "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
        "muffins for her friends every day with four. She sells the remainder at the farmers' market daily "
        "for $2 per fresh duck egg. How much in dollars does she make every day at the farmers' market?",
        "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
        "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer's market.\n#### 18",
    },
    {
        "question": "A robe takes 2 bolts of blue fiber and half that much white fiber.  How many bolts in total?",
        "answer": "It takes 2/2=<<2/2=1>>1 bolt of white fiber\n"
        "So the total amount of fabric is 2+1=<<2+1=3>>3 bolts of fabric\n#### 3",
    },
    {
        "question": "Josh buys a house for $80,000 and puts in $50,000 in repairs. This increased the value "
        "of the house by 150%.  How much profit did he make?",
        "answer": "The cost of the house and repairs came out to 80,000+50,000=$<<80000+50000=130000>>130,000\n"
        "He increased the value of the house by 80,000*1.5=<<80000*1.5=120000>>120,000\n"
        "So the new value of the house is 120,000+80,000=$<<120000+80000=200000>>200,000\n"
        "So he made a profit of 200,000-130,000=$<<200000-130000=70000>>70,000\n#### 70000",
    },
    {
        "question": "James runs 3 sprints 3 times a week, 60 meters each sprint. How many meters a week?",
        "answer": "He sprints 3*3=<<3*3=9>>9 times\nSo he runs 9*60=<<9*60=540>>540 meters\n#### 540",
    },
    {
        "question": "A shop sells 1,200 pens a day. How many pens does it sell in 2 days?",
        "answer": "1,200 * 2 = <<1200*2=2400>>2,400\n#### 2,400",
    },
]
GOLDS = ["18", "3", "70000", "540", "2400"]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(path: Path) -> DataConfig:
    return DataConfig(train=[SourceConfig(path=str(path))], default_grader="math")


def test_the_one_rule() -> None:
    assert [gsm8k_gold(r["answer"]) for r in ROWS] == GOLDS
    assert gsm8k_gold("18") is None and gsm8k_gold(18) is None and gsm8k_gold("x ## 4") is None
    with pytest.raises(NotAGold, match=GSM8K_RECIPE):
        gsm8k_gold("half of it\n#### 1/2")


def test_train_and_eval_rows_take_the_final_number_and_say_so_once(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "gsm8k_test.jsonl", ROWS)
    report = LoadReport()
    examples = load_examples([SourceConfig(path=str(path))], _cfg(path), seed=0, report=report)
    assert [e.ground_truth for e in examples] == GOLDS
    notes = report.notes()
    assert len(notes) == 1 and "\n" not in notes[0]
    assert "5 rows" in notes[0] and "'####'" in notes[0] and GSM8K_RECIPE in notes[0]
    # and right answers grade right against them, with either grader
    for e in examples:
        assert graders.grade("math", f"So \\boxed{{{e.ground_truth}}}.", e.ground_truth).verdict == "correct"
        assert graders.grade("gsm8k", f"so\n#### {e.ground_truth}", e.ground_truth).verdict == "correct"


def test_plain_rows_say_nothing(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "plain.jsonl", [{"question": "1+1?", "answer": "2"}])
    report = LoadReport()
    assert load_examples([SourceConfig(path=str(path))], _cfg(path), seed=0, report=report)
    assert report.notes() == []


def test_a_gsm8k_row_with_no_number_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = {"question": "q?", "answer": "It is half.\n#### 1/2"}
    path = _jsonl(tmp_path / "bad.jsonl", [ROWS[0], bad])
    with pytest.raises(DataError) as err:
        load_examples([SourceConfig(path=str(path))], _cfg(path), seed=0)
    first = str(err.value).splitlines()[0]
    assert "bad.jsonl:row 2" in first and GSM8K_RECIPE in first


def test_parquet_and_hf_dir_rows_go_through_the_same_rule(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(ROWS)
    ds.to_parquet(str(tmp_path / "g.parquet"))
    ds.save_to_disk(str(tmp_path / "g_dir"))
    for path in (tmp_path / "g.parquet", tmp_path / "g_dir"):
        report = LoadReport()
        examples = load_examples([SourceConfig(path=str(path))], _cfg(path), seed=0, report=report)
        assert [e.ground_truth for e in examples] == GOLDS, path
        assert len(report.notes()) == 1


@pytest.mark.parametrize("grader", ["math", "gsm8k"])
def test_rrl_grade_scores_right_answers_right(tmp_path: Path, grader: str) -> None:
    response = "\\boxed{%s}" if grader == "math" else "so\n#### %s"
    rows = [{"response": response % g, "ground_truth": r["answer"]} for r, g in zip(ROWS, GOLDS, strict=True)]
    src, out = _jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    res = CliRunner().invoke(
        app, ["grade", str(src), "-o", str(out), "--grader", grader, "--no-progress", "--workers", "1"]
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["verdict"] for x in lines] == ["correct"] * 5, lines
    assert res.output.count(GSM8K_RECIPE) == 1  # said once, not per row


def test_rrl_grade_refuses_a_gsm8k_row_with_no_number(tmp_path: Path) -> None:
    rows = [{"response": "\\boxed{1}", "ground_truth": "It is half.\n#### 1/2"}]
    src, out = _jsonl(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    res = CliRunner().invoke(
        app, ["grade", str(src), "-o", str(out), "--grader", "math", "--no-progress", "--workers", "1"]
    )
    line = json.loads(out.read_text())
    assert line["verdict"] == "error" and GSM8K_RECIPE in line["reason"], (res.output, line)


@pytest.mark.parametrize(
    "gold",
    [
        "She makes 9 * 2 = 18 dollars every day at the market",  # a sentence with the number in it
        "9 * 2 = <<9*2=18>>18",  # calculator notes: a worked solution
        "It is half.\n#### 1/2",  # GSM8K's line without a plain number
    ],
)
def test_a_gold_the_math_grader_cannot_read_is_an_error_never_incorrect(gold: str) -> None:
    grade = graders.grade("math", "\\boxed{18}", gold)
    assert grade.verdict == "error", grade
    assert graders.grade("math", "\\boxed{17}", gold).verdict == "error"  # whatever the answer


def test_answers_with_words_still_judge() -> None:
    assert graders.grade("math", "\\boxed{5\\text{ cm}}", "5 cm").verdict == "correct"
    assert graders.grade("math", "\\boxed{\\text{no solution}}", "no solution").verdict == "correct"
    assert graders.grade("math", "\\boxed{x=2 or x=3}", "x = 2 \\text{ or } x = 3").verdict == "correct"
