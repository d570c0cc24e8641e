"""``rrl grade`` defects a second new user hit (issue 30, items 4, 6, 7): options checked against every
grader the rows route to (and given per grader), an empty parquet named in one line, the input columns in
``--help``, the mean score named as such. Each test failed on main 5090d93."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graders.evaluation.summary import summarize
from reasoning_rl.cli.app import app

runner = CliRunner()

# One row per grader: routed by data_source (verl's names) to gsm8k and math.
ROWS = [
    {"data_source": "openai/gsm8k", "response": "so #### 4", "ground_truth": "4"},
    {"data_source": "lighteval/MATH", "response": "the answer is 5", "ground_truth": "5"},
]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _grade(*args: str) -> object:
    return runner.invoke(app, ["grade", *args, "--no-progress", "--workers", "1"])


def _short_error(output: str) -> None:
    assert "Traceback" not in output and len(output.strip().splitlines()) <= 3, output


def test_an_option_one_routed_grader_lacks_is_refused_before_any_row(tmp_path: Path) -> None:
    src, out = _write(tmp_path / "in.jsonl", ROWS), tmp_path / "out.jsonl"
    res = _grade(str(src), "-o", str(out), "--mode", "lenient")
    assert res.exit_code == 2, res.output
    assert (
        "grader 'gsm8k'" in res.output and "openai/gsm8k" in res.output and "math.mode=lenient" in res.output
    )
    _short_error(res.output)
    assert not out.exists() or out.read_text() == ""


def test_an_option_scoped_to_one_grader_reaches_that_grader_only(tmp_path: Path) -> None:
    src, out = _write(tmp_path / "in.jsonl", ROWS), tmp_path / "out.jsonl"
    res = _grade(str(src), "-o", str(out), "--option", "math.mode=lenient")
    assert res.exit_code == 0, res.output
    lines = {line["grader"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert lines["gsm8k"]["verdict"] == "correct"
    assert lines["math"]["verdict"] == "correct"  # no \boxed: only lenient mode reads "the answer is 5"
    # resuming with other per-grader options would mix runs: refused
    res = _grade(str(src), "-o", str(out), "--option", "math.mode=strict")
    assert res.exit_code == 2 and "grader_options" in res.output, res.output


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("maths.mode=lenient", "no row of"),  # a typo in the grader's name
        ("math.mode=bogus", "mode must be one of"),
        ("gsm8k.mode=lenient", "unknown option(s) ['mode']"),
        (".mode=x", "expected GRADER.KEY=VALUE"),
    ],
)
def test_per_grader_option_mistakes_are_one_line(tmp_path: Path, flag: str, needle: str) -> None:
    src, out = _write(tmp_path / "in.jsonl", ROWS), tmp_path / "out.jsonl"
    res = _grade(str(src), "-o", str(out), "--option", flag)
    assert res.exit_code == 2, res.output
    assert needle in res.output, res.output
    _short_error(res.output)


def test_a_later_rows_grader_is_checked_too(tmp_path: Path) -> None:
    """Not only the first row's grader: the gsm8k rows come after 50 math rows."""
    rows = [ROWS[1]] * 50 + [ROWS[0]]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    res = _grade(str(src), "-o", str(out), "--mode", "lenient")
    assert res.exit_code == 2 and "grader 'gsm8k' (row 51" in res.output, res.output


def test_summary_names_the_mean_score(tmp_path: Path) -> None:
    """A partial-credit grader's mean score is not an accuracy: the summary calls it mean_score."""
    src, out = _write(tmp_path / "in.jsonl", ROWS), tmp_path / "out.jsonl"
    res = _grade(str(src), "-o", str(out), "--option", "math.mode=lenient")
    assert res.exit_code == 0 and "mean_score" in res.output, res.output
    overall = summarize(out)["overall"]
    assert "accuracy" not in overall and overall["mean_score"] == 1.0 and overall["pass@1"] == 1.0


def test_grade_help_documents_the_input_columns() -> None:
    res = runner.invoke(app, ["grade", "--help"], terminal_width=200)
    assert res.exit_code == 0
    for column in ("responses", "reward_model.ground_truth", "data_source", "extra_info", "mean_score"):
        assert column in res.output, column


def test_empty_parquet_is_one_line(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"response": pa.array([], pa.string())}), empty)
    zero = tmp_path / "zero.parquet"
    zero.write_bytes(b"")
    for path in (empty, zero):
        res = _grade(str(path), "-o", str(tmp_path / "out.jsonl"), "--grader", "math")
        assert res.exit_code == 2 and str(path) in res.output, res.output
        _short_error(res.output)
