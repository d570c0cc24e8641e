"""JSON from users goes through one parser with limits, ``graders.loads_untrusted`` (issue 41): ``rrl grade
--option`` values nested deep or holding a huge integer crashed with a traceback (exit 1), and so did a training
row (``json`` raises RecursionError / a bare ValueError there, which only ``rrl grade``'s row reader caught)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graders import JSONLimitError, UntrustedJSONError, loads_untrusted
from graders.code.suites import GroundTruthError, parse_suite
from reasoning_rl.cli.app import app
from reasoning_rl.config import DataConfig, SourceConfig
from reasoning_rl.data import DataError, LoadReport, load_examples

DEEP = "[" * 100_000
HUGE = "9" * 100_000


def test_limits_hold_whatever_the_interpreter_allows() -> None:
    assert loads_untrusted('{"a": [1, -2, 3.5]}') == {"a": [1, -2, 3.5]}
    assert loads_untrusted("1" * 4300) == int("1" * 4300)
    for text, why in [
        (DEEP, "is nested deeper than 100 levels"),
        ("[" * 101 + "]" * 101, "is nested deeper than 100 levels"),  # parses, but deeper than allowed
        (HUGE, r"holds an integer of 100000 digits \(at most 4300\)"),
        ("-" + "1" * 4301, "holds an integer of 4301 digits"),
    ]:
        with pytest.raises(JSONLimitError, match=why):
            loads_untrusted(text)
    with pytest.raises(UntrustedJSONError, match="is not valid JSON: Expecting value at column 1"):
        loads_untrusted("nope")
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # PYTHONINTMAXSTRDIGITS=0: the interpreter's own cap is lifted
    try:
        with pytest.raises(JSONLimitError, match="integer of 5000 digits"):
            loads_untrusted("7" * 5000)
    finally:
        sys.set_int_max_str_digits(old)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (DEEP, "the value is nested deeper than 100 levels (lists and objects)"),
        (HUGE, "the value holds an integer of 100000 digits (at most 4300)"),
    ],
)
def test_grade_option_past_a_limit_is_one_line_naming_the_option(
    tmp_path: Path, value: str, why: str
) -> None:
    rows = tmp_path / "in.jsonl"
    rows.write_text('{"response": "\\\\boxed{4}", "ground_truth": "4"}\n')
    res = CliRunner().invoke(
        app,
        ["grade", str(rows), "-o", str(tmp_path / "out.jsonl"), "--grader", "math", "--option", f"x={value}"],
    )
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert res.stderr.strip().splitlines() == [f"error: --option x: {why}"], res.stderr
    # a value that is simply not JSON is still a string option
    ok = CliRunner().invoke(
        app,
        [
            "grade",
            str(rows),
            "-o",
            str(tmp_path / "o2.jsonl"),
            "--grader",
            "math",
            "--option",
            "math.mode=lenient",
        ],
    )
    assert ok.exit_code == 0, ok.output


def test_training_rows_past_a_limit_cost_their_row(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    good = '{"question": "1+1?", "answer": "2"}'
    path.write_text(
        "\n".join([good, '{"question": "q", "answer": ' + DEEP, '{"question": "q", "answer": ' + HUGE + "}"])
    )
    data = DataConfig(train=[SourceConfig(path=str(path))])
    with pytest.raises(DataError, match=r"rows.jsonl:row 2 is nested deeper than 100 levels"):
        load_examples(data.train, data, seed=0)
    report = LoadReport()
    skip = DataConfig(train=[SourceConfig(path=str(path))], on_bad_row="skip")
    assert [e.ground_truth for e in load_examples(skip.train, skip, seed=0, report=report)] == ["2"]
    assert [r.split("rows.jsonl:")[1] for r in report.skipped] == [
        "row 2 is nested deeper than 100 levels (lists and objects)",
        "row 3 holds an integer of 100000 digits (at most 4300)",
    ]


def test_code_ground_truth_text_past_a_limit_is_a_ground_truth_error() -> None:
    with pytest.raises(GroundTruthError, match="ground truth is nested deeper than 100 levels"):
        parse_suite(DEEP)


@pytest.mark.parametrize(
    ("override", "why"),
    [(f"grading.options.math.x={DEEP}", "value cannot be read: nested too deeply"),
     (f"rollout.n={HUGE}", "value cannot be read: Exceeds the limit (4300 digits)")],
)  # fmt: skip
def test_train_override_past_a_limit_is_one_line_naming_it(tmp_path: Path, override: str, why: str) -> None:
    """The same class of input in `rrl train`'s YAML overrides (and config file) crashed with a traceback too."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run: {name: x}\nmodel: {path: m}\ndata: {train: {generator: fixed_digit}}\n")
    res = CliRunner().invoke(app, ["train", str(cfg), "--print-config", override])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output[-500:]
    line = " ".join(res.stderr.split())
    assert f"error: override '{override[:20]}" in line and why in line, line[-500:]
    cfg.write_text(f"run: {{name: x}}\nrollout: {{n: {HUGE}}}\n")
    res = CliRunner().invoke(app, ["train", str(cfg), "--print-config"])
    assert res.exit_code == 2 and "cannot be read: Exceeds the limit" in res.stderr, res.output[-500:]
