"""``rrl grade`` defects from a new user's first runs and a red-team pass (issues 14, 15): run-wide mistakes
fail before any row, resume refuses a different run, the cache follows grader code, invalid Unicode and hostile
``grader`` fields cost one row, stdout stays clean, small input/display fixes. Each test failed on main 36efa7d."""

from __future__ import annotations

import gzip
import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rrl_testutil import REPO
from typer.testing import CliRunner

from graders.code import CodeGrader
from graders.evaluation.summary import summarize
from graders.lean import LeanGrader
from graders.math import MathGrader
from reasoning_rl.cli.app import app

runner = CliRunner()


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _grade(*args: str) -> object:
    return runner.invoke(app, ["grade", *args, "--no-progress", "--workers", "1"])


MATH_ROWS = [
    {"id": 1, "response": "\\boxed{4}", "ground_truth": "4"},
    {"id": 2, "response": "so the answer is 5", "ground_truth": "5"},
]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--grader", "mathz"], "unknown grader 'mathz'"),
        (["--grader", "math", "--mode", "bogus"], "mode must be one of"),
        (["--grader", "math", "--option", "timeout=3"], "unknown option(s) ['timeout']"),
        (["--grader", "code", "--mode", "strict"], "unknown code-grader option(s) ['mode']"),
        (["--source-grader", "toy=mathz", "--grader", "math"], "unknown grader 'mathz'"),
        ([], "no grader for data_source None"),  # forgot --grader: the rows name none
    ],
)
def test_run_wide_mistakes_fail_before_any_row(tmp_path: Path, flags: list[str], needle: str) -> None:
    src, out = _write(tmp_path / "in.jsonl", MATH_ROWS), tmp_path / "out.jsonl"
    res = _grade(str(src), "-o", str(out), *flags)
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
    assert not out.exists() or out.read_text() == ""  # nothing for a resume to skip


def test_resume_refuses_a_different_run_and_overwrite_regrades(tmp_path: Path) -> None:
    src, out = _write(tmp_path / "in.jsonl", MATH_ROWS), tmp_path / "out.jsonl"
    assert _grade(str(src), "-o", str(out), "--grader", "math").exit_code == 0
    assert [line["verdict"] for line in _lines(out)] == ["correct", "incorrect"]  # strict: no box, no answer

    # Same command again: resumes (nothing left to do).
    res = _grade(str(src), "-o", str(out), "--grader", "math")
    assert res.exit_code == 0 and "2 already done" in res.output, res.output

    # Another mode: the old verdicts must not be kept.
    res = _grade(str(src), "-o", str(out), "--grader", "math", "--mode", "lenient")
    assert res.exit_code == 2 and "different run" in res.output and '"mode": "lenient"' in res.output, (
        res.output
    )
    res = _grade(str(src), "-o", str(out), "--grader", "math", "--mode", "lenient", "--overwrite")
    assert res.exit_code == 0, res.output
    assert [line["verdict"] for line in _lines(out)] == ["correct", "correct"]

    # Another input into the same output: refused (it would append after the first N rows).
    other = _write(
        tmp_path / "other.jsonl", [*MATH_ROWS, {"id": 3, "response": "\\boxed{1}", "ground_truth": "1"}]
    )
    res = _grade(str(other), "-o", str(out), "--grader", "math", "--mode", "lenient")
    assert res.exit_code == 2 and "input:" in res.output, res.output

    # The same input, edited (a row appended): refused too.
    _write(src, [*MATH_ROWS, {"id": 3, "response": "\\boxed{1}", "ground_truth": "1"}])
    res = _grade(str(src), "-o", str(out), "--grader", "math", "--mode", "lenient")
    assert res.exit_code == 2 and "different run" in res.output, res.output
    assert len(_lines(out)) == 2


def test_output_without_run_record_is_not_resumed(tmp_path: Path) -> None:
    src, out = _write(tmp_path / "in.jsonl", MATH_ROWS), tmp_path / "out.jsonl"
    assert _grade(str(src), "-o", str(out), "--grader", "math").exit_code == 0
    out.with_name(out.name + ".run.json").unlink()
    res = _grade(str(src), "-o", str(out), "--grader", "math")
    assert res.exit_code == 2 and "no run record" in res.output and "--overwrite" in res.output


def test_exit_status_when_rows_are_errors(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    bad = _write(tmp_path / "bad.jsonl", [{"id": 1, "response": "x"}, {"id": 2, "response": "y"}])
    res = _grade(str(bad), "-o", str(out), "--grader", "math")
    assert res.exit_code == 1 and "every row" in res.output, res.output

    mixed = _write(tmp_path / "mixed.jsonl", [*MATH_ROWS, {"id": 3, "response": "x"}])
    res = _grade(str(mixed), "-o", str(tmp_path / "m1.jsonl"), "--grader", "math")
    assert res.exit_code == 0, res.output
    res = _grade(str(mixed), "-o", str(tmp_path / "m2.jsonl"), "--grader", "math", "--fail-on-errors")
    assert res.exit_code == 1 and "--fail-on-errors" in res.output, res.output


GRADER_SOURCE = """
from graders.types import Grade


class Judge:
    name = "judge"
    version = "1.0.0"

    def grade(self, response, ground_truth, **options):
        print("PLUGIN-STDOUT", response)
        return Grade.{verdict}("by the code of the day", answer=response)
"""


def _subprocess_grade(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "plugins"), *sys.path]))
    cmd = [sys.executable, "-m", "reasoning_rl.cli", "grade", *args, "--no-progress", "--workers", "1"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_cache_follows_grader_source_and_says_when_it_replays(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "day_judge.py").write_text(GRADER_SOURCE.format(verdict="correct"))
    src, out = _write(tmp_path / "in.jsonl", [{"response": "a", "ground_truth": "b"}]), tmp_path / "out.jsonl"
    args = (str(src), "-o", str(out), "--grader", "day_judge:Judge", "--overwrite")
    first = _subprocess_grade(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    assert _lines(out)[0]["verdict"] == "correct" and "replayed" not in first.stderr

    again = _subprocess_grade(tmp_path, *args)
    assert again.returncode == 0 and f"1 grades replayed from cache {out}.cache.sqlite" in again.stderr

    # The grader's code changes, its version does not: the cache must not replay the old verdict.
    (plugins / "day_judge.py").write_text(GRADER_SOURCE.format(verdict="incorrect"))
    changed = _subprocess_grade(tmp_path, *args)
    assert changed.returncode == 0, changed.stderr
    assert _lines(out)[0]["verdict"] == "incorrect" and "replayed" not in changed.stderr
    # ...and a resume into rows of the old code is refused (the run record holds the source hash).
    (plugins / "day_judge.py").write_text(GRADER_SOURCE.format(verdict="correct"))
    resumed = _subprocess_grade(tmp_path, *args[:-1])
    assert resumed.returncode == 2 and "grader 'day_judge:Judge'" in resumed.stderr, resumed.stderr

    # Plugin prints (here in the worker process) land on stderr; stdout holds the summary only.
    assert "PLUGIN-STDOUT" in changed.stderr and "PLUGIN-STDOUT" not in changed.stdout
    assert "rrl grade: results" in changed.stdout


def test_lone_surrogate_row_is_graded_and_written(tmp_path: Path) -> None:
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(
        '{"id": "\\ud83d", "response": "\\ud83d \\\\boxed{4}", "ground_truth": "4", "grader": "math"}\n'
        + json.dumps({"id": "ok", "response": "\\boxed{2}", "ground_truth": "2", "grader": "math"})
        + "\n"
    )
    res = _grade(str(src), "-o", str(out))  # the cache is on: its key hashes the response
    assert res.exit_code == 0, res.output
    lines = _lines(out)
    assert [line["id"] for line in lines] == ["\ud83d", "ok"] and lines[1]["verdict"] == "correct"
    assert lines[0]["verdict"] in ("correct", "incorrect")
    out.read_bytes().decode("utf-8")  # the file stays valid UTF-8
    res = _grade(str(src), "-o", str(out))  # and resumes
    assert res.exit_code == 0 and "2 already done" in res.output, res.output


def test_row_grader_field_never_imports_a_module(tmp_path: Path) -> None:
    assert "this" not in sys.modules
    rows = [
        {"id": 1, "response": "\\boxed{1}", "ground_truth": "1", "grader": "math"},
        {"id": 2, "response": "x", "ground_truth": "1", "grader": "this:x"},
        {"id": 3, "response": "x", "ground_truth": "1", "grader": "pathlib:WindowsPath"},
    ]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    res = _grade(str(src), "-o", str(out))
    assert res.exit_code == 0, res.output
    by_id = {line["id"]: line for line in _lines(out)}
    assert by_id[1]["verdict"] == "correct"
    for i in (2, 3):
        assert by_id[i]["verdict"] == "error" and "must be a registered grader name" in by_id[i]["reason"]
    assert "this" not in sys.modules  # `import this` would have run (and printed the Zen of Python)


def test_maj_votes_by_grader_equivalence(tmp_path: Path) -> None:
    """``0.5`` and ``\\frac12`` are one answer (2 votes), beating ``3`` (1 vote, seen first)."""
    row = {"responses": ["\\boxed{3}", "\\boxed{0.5}", "\\boxed{\\frac12}"], "ground_truth": "\\frac{1}{2}"}
    src, out = _write(tmp_path / "in.jsonl", [row]), tmp_path / "out.jsonl"
    res = _grade(str(src), "-o", str(out), "--grader", "math")
    assert res.exit_code == 0, res.output
    (line,) = _lines(out)
    assert line["maj"] is True and line["majority_answer"] == "0.5" and line["verdict"] == "correct"
    assert len(line["grades"]) == 3  # the equivalence checks are not responses


def test_empty_input_says_so(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text("\n\n")
    res = _grade(str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"), "--grader", "math")
    assert res.exit_code == 2 and "has no rows" in res.output


def test_bom_and_gzip_inputs(tmp_path: Path) -> None:
    text = "".join(json.dumps(r) + "\n" for r in MATH_ROWS)
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    with gzip.open(tmp_path / "rows.jsonl.gz", "wt") as fh:
        fh.write(text)
    for name in ("bom.jsonl", "rows.jsonl.gz"):
        out = tmp_path / f"{name}.out"
        res = _grade(str(tmp_path / name), "-o", str(out), "--grader", "math")
        assert res.exit_code == 0, res.output
        assert [line["verdict"] for line in _lines(out)] == ["correct", "incorrect"]


def test_json_error_message_has_no_doubled_at(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(MATH_ROWS[0]) + '\n{"response": "unterminated\n')
    out = tmp_path / "out.jsonl"
    assert _grade(str(src), "-o", str(out), "--grader", "math").exit_code == 0
    reason = {line["row"]: line for line in _lines(out)}[2]["reason"]
    assert "Unterminated string starting at column" in reason and "at at" not in reason


def test_all_row_computes_maj_over_the_rows_of_its_k(tmp_path: Path) -> None:
    """pass@3 and maj@3 of ALL come from the same rows (those with 3 samples), not maj over every row."""

    def line(source: str, verdicts: list[str], maj: bool) -> dict:
        grades = [
            {"score": float(v == "correct"), "verdict": v, "reason": "", "details": {}} for v in verdicts
        ]
        return {"data_source": source, "grades": grades, "maj": maj, "reason": ""}

    out = _write(
        tmp_path / "out.jsonl",
        [line("one", ["correct"], True)] * 3 + [line("three", ["incorrect", "incorrect", "correct"], False)],
    )
    overall = summarize(out)["overall"]
    assert overall["pass@3"] == 1.0 and overall["maj@3"] == 0.0  # main: maj@3 = 3/4 from mixed k
    assert overall["pass@1"] == pytest.approx((3 * 1.0 + 1 / 3) / 4)


def test_tables_are_not_cut_at_80_columns_off_a_terminal(tmp_path: Path) -> None:
    source = "a_very_long_data_source_name_" * 4
    rows = [{**r, "data_source": source} for r in MATH_ROWS]
    src = _write(tmp_path / "in.jsonl", rows)
    res = _grade(str(src), "-o", str(tmp_path / "out.jsonl"), "--grader", "math")
    assert res.exit_code == 0, res.output
    assert any(source in row and "0.5000" in row for row in res.output.splitlines()), res.output


def test_builtin_grader_versions_use_one_scheme() -> None:
    versions = {g.name: g.version for g in (MathGrader(), CodeGrader(), LeanGrader())}
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in versions.values()), versions


def test_hf_dir_with_the_repo_datasets_folder_shadowing_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    """From the repo root without HF datasets installed, `import datasets` finds the top-level datasets/ data
    folder as an empty namespace package: simulate exactly that import result."""
    spec = importlib.machinery.PathFinder.find_spec("datasets", [str(REPO)])
    assert spec is not None and spec.origin is None  # a namespace package: what Python finds without HF
    shadow = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "datasets", shadow)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "dataset_info.json").write_text("{}")
    res = runner.invoke(app, ["grade", str(hf), "-o", str(tmp_path / "o.jsonl"), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "needs the `datasets` package" in res.output and "found the folder" in res.output


def test_builtin_graders_check_options_like_grade_does() -> None:
    """One rule per grader: what ``check_options`` rejects, ``grade`` reports as an error."""
    math = MathGrader()
    with pytest.raises(ValueError, match="mode must be one of"):
        math.check_options({"mode": "x"})
    assert "mode must be one of" in math.grade("\\boxed{1}", "1", mode="x").reason
    math.check_options({"mode": "lenient", "timeout_s": 1})
    with pytest.raises(ValueError, match="unknown code-grader option"):
        CodeGrader().check_options({"mode": "strict"})
    with pytest.raises(ValueError, match="unknown lean grader option"):
        LeanGrader().check_options({"timeout": 3})


def test_equivalence_checks_plan_pairs_of_distinct_extracted_answers() -> None:
    from graders.evaluation.scoring import AnswerKey, equivalence_checks

    keys = [
        AnswerKey("3", True),
        AnswerKey("0.5", True),
        None,
        AnswerKey("0.5", True),
        AnswerKey("txt", False),
    ]
    # one check per unordered pair of distinct comparable answers: response 1 (first "0.5") against "3"
    assert equivalence_checks(keys) == [(1, "3")]
    assert equivalence_checks([AnswerKey("a", False), AnswerKey("b", False)]) == []


def test_plugin_import_prints_do_not_reach_stdout(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "noisy_judge.py").write_text(
        'print("IMPORT-NOISE")\n' + textwrap.dedent(GRADER_SOURCE.format(verdict="correct"))
    )
    src = _write(tmp_path / "in.jsonl", [{"response": "a", "ground_truth": "b"}])
    res = _subprocess_grade(
        tmp_path, str(src), "-o", str(tmp_path / "o.jsonl"), "--grader", "noisy_judge:Judge"
    )
    assert res.returncode == 0, res.stderr
    assert "IMPORT-NOISE" in res.stderr and "IMPORT-NOISE" not in res.stdout
    assert "PLUGIN-STDOUT" not in res.stdout


def test_an_exception_for_one_row_costs_that_row_only(tmp_path: Path, monkeypatch) -> None:
    """Whatever the pool cannot take for one row (here: a submit that raises for its response) becomes that
    row's error grade; the run goes on and exits 0."""
    from graders.evaluation import run as grade_run

    real_submit = grade_run.GradingPool.submit

    def submit(self, request):  # type: ignore[no-untyped-def]
        if request.response == "poison":
            raise ValueError("cannot hash this response")
        return real_submit(self, request)

    monkeypatch.setattr(grade_run.GradingPool, "submit", submit)
    rows = [*MATH_ROWS, {"id": 3, "responses": ["\\boxed{1}", "poison"], "ground_truth": "1"}]
    src, out = _write(tmp_path / "in.jsonl", rows), tmp_path / "out.jsonl"
    res = _grade(str(src), "-o", str(out), "--grader", "math", "--no-cache")
    assert res.exit_code == 0, res.output
    by_id = {line["id"]: line for line in _lines(out)}
    assert by_id[1]["verdict"] == "correct" and sorted(by_id) == [1, 2, 3]
    verdicts = [g["verdict"] for g in by_id[3]["grades"]]
    assert verdicts == ["correct", "error"] and "cannot hash this response" in by_id[3]["grades"][1]["reason"]
