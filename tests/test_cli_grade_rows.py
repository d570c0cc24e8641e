"""Every field ``rrl grade`` and ``rrl grade --regrade`` read from a row or a results line is checked, and a bad
one costs that row only, named by file and line (issue 28): a deeply nested or huge-integer JSON row crashed
``rrl grade`` (nothing written, every resume dying the same way), a results line with a non-integer `row` or
non-object `grades` crashed ``--regrade``, and ``--regrade`` imported whatever ``module:attr`` a results line
(or the run record beside it) named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rrl_testutil import REPO
from typer.testing import CliRunner, Result

from reasoning_rl.cli.app import app

runner = CliRunner()
GOOD = {"response": "\\boxed{4}", "ground_truth": "4"}


def _grade(*args: str) -> Result:
    return runner.invoke(app, ["grade", *args, "--no-progress", "--workers", "1"])


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _graded(tmp_path: Path) -> Path:
    """Results of two good rows, graded by `math`."""
    src, out = tmp_path / "in.jsonl", tmp_path / "old.jsonl"
    src.write_text(
        json.dumps(GOOD) + "\n" + json.dumps({"response": "\\boxed{5}", "ground_truth": "4"}) + "\n"
    )
    res = _grade(str(src), "-o", str(out), "--grader", "math")
    assert res.exit_code == 0, res.output
    return out


def test_deeply_nested_and_huge_integer_rows_cost_their_row_only(tmp_path: Path) -> None:
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    deep = '{"response": "x", "ground_truth": ' + "[" * 100_000 + "]" * 100_000 + "}"  # json: RecursionError
    value: object = []
    for _ in range(120):
        value = [value]
    nested = {**GOOD, "extra_info": {"a": value}}  # parses, but deeper than a row may be
    huge = '{"response": "x", "ground_truth": ' + "1" * 5000 + "}"  # json: ValueError (digit limit)
    src.write_text("\n".join([json.dumps(GOOD), deep, json.dumps(GOOD), json.dumps(nested), huge]) + "\n")
    res = _grade(str(src), "-o", str(out), "--grader", "math")
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    lines = {line["row"]: line for line in _lines(out)}
    assert sorted(lines) == [1, 2, 3, 4, 5]
    assert lines[1]["verdict"] == lines[3]["verdict"] == "correct"
    for row in (2, 4, 5):
        assert lines[row]["verdict"] == "error", lines[row]
        assert lines[row]["reason"].startswith(f"malformed_row: row {row}: in.jsonl line {row} "), lines[row]
    assert "nested deeper than 100 levels" in lines[2]["reason"] and "digits" in lines[5]["reason"]
    assert lines[2]["raw"] == deep  # kept, never dropped
    res = _grade(str(src), "-o", str(out), "--grader", "math")  # and it resumes
    assert res.exit_code == 0 and "5 already done" in res.output, res.output


BAD_LINES: list[tuple[dict[str, object], str]] = [
    ({"row": "abc"}, "field `row` must be a positive integer"),
    ({"row": 1.5}, "field `row` must be a positive integer"),
    ({"row": True}, "field `row` must be a positive integer"),
    ({"grades": "correct"}, "field `grades` must be a list of grade objects"),
    ({"grades": {"verdict": "correct"}}, "field `grades` must be a list of grade objects"),
    ({"grades": [1]}, "field `grades` must be a list of grade objects"),
    ({"grades": [{"verdict": 3}]}, "field `grades` must be a list of grade objects"),
    ({"grader": ["math"]}, "field `grader` must be a grader name"),
    ({"grader_version": {"v": 1}}, "field `grader_version` must be a string"),
]


def test_regrade_checks_every_field_of_a_results_line(tmp_path: Path) -> None:
    old = _graded(tmp_path)
    good = _lines(old)
    with old.open("a") as fh:
        for change, _ in BAD_LINES:
            fh.write(json.dumps({**good[0], **change}) + "\n")
        fh.write('{"grader": "math", "grades": [' * 2000 + "\n")  # not JSON, and too deep to parse
    res = _grade("--regrade", str(old))
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    assert "0 verdict(s) flipped out of 2" in res.output  # the good lines were re-graded
    for number, (_, needle) in enumerate(BAD_LINES, start=3):
        assert f"not re-graded: old.jsonl line {number}: {needle}" in res.output, (number, res.output)
    assert (
        f"not re-graded: old.jsonl line {len(BAD_LINES) + 3} is nested deeper than 100 levels" in res.output
    )


SIDE_EFFECT = """from pathlib import Path
Path(__file__).with_name("imported").write_text("the module ran")
from graders.math import MathGrader as Grader
"""


def _regrade(tmp_path: Path, old: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "plugins"), str(REPO)]))
    cmd = [sys.executable, "-m", "reasoning_rl.cli", "grade", "--regrade", str(old), "--workers", "1", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)


def test_regrade_loads_only_registered_graders_or_those_named_on_the_command_line(tmp_path: Path) -> None:
    """A results file is data: a line (or the run record beside it) naming `module:attr` never imports it;
    the user's own `--grader module:attr` does."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "rrl_probe_side_effect.py").write_text(SIDE_EFFECT)
    old = _graded(tmp_path)
    good = _lines(old)[0]
    record = old.with_name(old.name + ".run.json")
    data = json.loads(record.read_text())
    data["graders"]["rrl_probe_side_effect:Grader"] = {"name": "probe", "version": "2.0.0"}
    record.write_text(json.dumps(data))
    with old.open("a") as fh:
        for grader in ("os:system", "rrl_probe_side_effect:Grader", "probe"):
            fh.write(json.dumps({**good, "grader": grader}) + "\n")
    res = _regrade(tmp_path, old)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not (tmp_path / "plugins" / "imported").exists(), "the module was imported"
    assert "0 verdict(s) flipped out of 2" in res.stdout, res.stdout
    for number, spec in (
        (3, "os:system"),
        (4, "rrl_probe_side_effect:Grader"),
        (5, "rrl_probe_side_effect:Grader"),  # `probe`, by the run record
    ):
        assert f"old.jsonl line {number}: grader " in res.stdout and f"(--grader {spec})" in res.stdout
    assert "Traceback" not in res.stdout + res.stderr

    named = _regrade(tmp_path, old, "--grader", "rrl_probe_side_effect:Grader")
    assert named.returncode == 0, named.stdout + named.stderr
    assert (tmp_path / "plugins" / "imported").exists()
    assert "0 verdict(s) flipped out of 4" in named.stdout, named.stdout  # lines 4 and 5 re-graded too
    assert "old.jsonl line 3: grader 'os:system'" in named.stdout


def test_a_damaged_output_is_refused_in_one_line(tmp_path: Path) -> None:
    """Resuming reads OUTPUT's `row` fields: a line nested too deeply or a `row` that is no number refuses the
    resume with one line naming the file and line, never a traceback."""
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(GOOD) + "\n")
    for damaged in ('{"row": ' + "[" * 100_000 + "\n", json.dumps({"row": "1"}) + "\n"):
        out = tmp_path / "out.jsonl"
        out.write_text(damaged)
        res = _grade(str(src), "-o", str(out), "--grader", "math")
        assert res.exit_code == 2, res.output
        assert f"{out} line 1 is not an rrl grade result" in res.output, res.output
        assert "Traceback" not in res.output and len(res.output.strip().splitlines()) <= 3, res.output


def test_regrade_refuses_a_damaged_run_record_in_one_line(tmp_path: Path) -> None:
    old = _graded(tmp_path)
    record = old.with_name(old.name + ".run.json")
    for damaged in ('{"graders": ["math"]}', '{"graders": ' + "[" * 100_000, b"\xff\xfe{}"):
        record.write_bytes(damaged if isinstance(damaged, bytes) else damaged.encode())
        res = _grade("--regrade", str(old))
        assert res.exit_code == 2, res.output
        assert f"{record} is unreadable" in res.output and "Traceback" not in res.output, res.output
        assert len(res.output.strip().splitlines()) <= 3, res.output
