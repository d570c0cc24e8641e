"""A data row may name only a registered grader (issue 41): one rule, ``graders.row_grader``, for every reader
of rows. Before, a training/eval row's ``grader: "module:attr"`` was imported by ``rrl train --dry-run`` and by
every grading worker, while ``rrl grade`` and ``--regrade`` already refused it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graders import RowGraderError, row_grader
from reasoning_rl.cli.app import app
from reasoning_rl.config import DataConfig, SourceConfig
from reasoning_rl.data import DataError, LoadReport, load_examples

SIMPLE_ROW = {"question": "What is 2+3?", "answer": "5"}


def planted_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """An importable module whose import leaves a marker file: the proof that a row made us import it."""
    marker = tmp_path / "imported.marker"
    (tmp_path / "planted_row_grader.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "class Planted:\n    name = 'planted'\n    version = '1'\n"
        "    def grade(self, response, ground_truth, **options):\n        raise AssertionError('never')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "planted_row_grader:Planted", marker


def rows_file(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_row_grader_accepts_names_and_refuses_specs() -> None:
    assert row_grader({"grader": "math"}, trusted="--grader") == "math"
    assert row_grader({}, trusted="--grader") is None and row_grader({"grader": ""}, trusted="x") is None
    for bad in ("os:system", 3, ["math"]):
        with pytest.raises(RowGraderError, match=r"field `grader` must be a registered grader name") as e:
            row_grader({"grader": bad}, trusted="data.default_grader")
        assert "accepted from data.default_grader only" in str(e.value) and "\n" not in str(e.value)


def test_training_row_naming_a_module_is_refused_and_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, marker = planted_module(tmp_path, monkeypatch)
    path = rows_file(tmp_path / "rows.jsonl", [SIMPLE_ROW, {**SIMPLE_ROW, "grader": spec}])
    data = DataConfig(train=[SourceConfig(path=str(path))])
    with pytest.raises(DataError, match=r"rows.jsonl:row 2: field `grader` must be a registered grader name"):
        load_examples(data.train, data, seed=0, known_graders=frozenset({"math"}))
    # data.on_bad_row=skip: that row is skipped and counted, the others load
    report = LoadReport()
    skip = DataConfig(train=[SourceConfig(path=str(path))], on_bad_row="skip")
    kept = load_examples(skip.train, skip, seed=0, report=report)
    assert [e.grader for e in kept] == ["math"] and len(report.skipped) == 1
    assert "row 2: field `grader`" in report.skipped[0]
    # a row that is not a string is not silently routed to the default either
    rows_file(path, [{**SIMPLE_ROW, "grader": 7}])
    with pytest.raises(DataError, match=r"row 1: field `grader` must be a registered grader name .*, got 7;"):
        load_examples(data.train, data, seed=0)
    assert not marker.exists()


@pytest.mark.slow
def test_dry_run_refuses_the_row_in_one_line_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path
) -> None:
    from tests.trainer.test_train_e2e import config

    spec, marker = planted_module(tmp_path, monkeypatch)
    path = rows_file(tmp_path / "rows.jsonl", [SIMPLE_ROW, {**SIMPLE_ROW, "grader": spec}])
    cfg = config(
        tmp_path, tiny_model_dir, "dry", data={"train": {"path": str(path)}, "default_grader": "math"}
    )
    res = CliRunner().invoke(app, ["train", str(cfg), "--dry-run"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and not marker.exists()
    line = " ".join(res.stderr.split())
    assert "rows.jsonl:row 2: field `grader` must be a registered grader name" in line, line
    assert "module:attr specs are accepted from data.default_grader" in line
    assert not (tmp_path / "dry").exists()
