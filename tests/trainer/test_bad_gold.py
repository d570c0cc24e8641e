"""A ground truth no grader can judge (``\\frac{`` for math, issue 41) is found when the data loads, through the
grading runtime's ``gold_problems`` (a grader's ``check_gold``), and excluded with a one-line warning or refused
(``data.bad_gold``). Before, its samples were graded ``error`` (with an extractable answer) or ``incorrect``
(without one) and trained; a run whose every gold was broken exited 0 having learned nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graders.math import MathGrader
from graders.math.gsm8k import GSM8KGrader
from graders.runtime import gold_problems
from reasoning_rl.cli.app import app
from reasoning_rl.config import DataConfig, SourceConfig
from reasoning_rl.data import DataError, load_examples, screen_golds

BROKEN = ["\\frac{", "\\sqrt{", "\\frac{1}{2", "", "$$", None, float("nan")]
SOUND = ["42", "\\frac{1}{2}", "x+1", "\\text{(C)}", "(1,2]", 3, "1,000", "\\{1, 2\\}"]


def test_math_and_gsm8k_graders_say_which_golds_they_cannot_judge() -> None:
    math = MathGrader(max_workers=1)
    for gold in BROKEN:
        assert math.check_gold(gold) is not None, gold
    assert math.check_gold("\\frac{") == "ground truth does not parse: \\frac{"
    for gold in SOUND:
        assert math.check_gold(gold) is None, gold
        assert math.grade(f"\\boxed{{{gold}}}", gold).verdict == "correct", gold  # judgeable indeed
    assert math.grade("no answer at all", "\\frac{").verdict == "incorrect"  # what it trained on before
    gsm8k = GSM8KGrader()
    assert gsm8k.check_gold("72") is None and gsm8k.check_gold("\\frac{") is not None
    # through the runtime, by spec: each distinct gold once, indices of the bad ones; no check_gold: all good
    assert set(gold_problems("math", ["1", "\\frac{", "2", "\\frac{"])) == {1, 3}
    assert gold_problems("format", ["\\frac{"]) == {}
    math.release()


def _rows(tmp_path: Path, golds: list[str]) -> Path:
    path = tmp_path / "rows.jsonl"
    rows = [{"id": f"r{i}", "question": f"q{i}", "answer": g} for i, g in enumerate(golds)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_exclude_warns_refuse_stops_and_nothing_left_refuses(tmp_path: Path) -> None:
    data = DataConfig(train=[SourceConfig(path=str(_rows(tmp_path, ["2", "\\frac{", "5", "\\sqrt{"])))])
    examples = load_examples(data.train, data, seed=0)
    kept, bad = screen_golds(examples, "train", "exclude")
    assert [e.uid for e in kept] == ["r0", "r2"] and bad is not None
    line = bad.line()
    assert line.startswith(
        "2 train row(s) have a ground truth their grader cannot judge (ids r1, r3; first: "
    )
    assert "math: ground truth does not parse: \\frac{" in line and "\n" not in line
    with pytest.raises(DataError, match=r"2 train row\(s\) .* set data.bad_gold=exclude"):
        screen_golds(examples, "train", "refuse")
    assert screen_golds(kept, "train", "refuse") == (kept, None)
    _rows(tmp_path, ["\\frac{"] * 3)
    broken = load_examples(data.train, data, seed=0)
    with pytest.raises(DataError, match=r"every train row is excluded, nothing is left"):
        screen_golds(broken, "train", "exclude")


@pytest.mark.slow
def test_dry_run_reports_excluded_rows_and_refuses_when_none_is_left(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    from tests.trainer.test_train_e2e import config

    path = _rows(tmp_path, ["2", "\\frac{", "5"])
    cfg = config(
        tmp_path, tiny_model_dir, "dry", data={"train": {"path": str(path)}, "default_grader": "math"}
    )
    res = CliRunner().invoke(app, ["train", str(cfg), "--dry-run"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "excluded 1 train row(s) have a ground truth their grader cannot judge (ids r1;" in out, out
    assert "data: 2 train" in out
    refused = CliRunner().invoke(app, ["train", str(cfg), "--dry-run", "data.bad_gold=refuse"])
    assert refused.exit_code == 2 and "ids r1;" in refused.stderr and "Traceback" not in refused.output
    _rows(tmp_path, ["\\frac{", "\\sqrt{"])
    none_left = CliRunner().invoke(app, ["train", str(cfg), "--dry-run"])
    err = " ".join(none_left.stderr.split())
    assert none_left.exit_code == 2 and "every train row is excluded, nothing is left" in err, (
        none_left.output
    )
