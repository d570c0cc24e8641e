"""Grader governance: `rrl graders selftest` (golden cases shipped with each grader, plugins too) and
`rrl grade --regrade` (every verdict that flipped between the stored and the installed grader version)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graders.runtime import GradingPool
from graders.selftest import GoldenCase, SelftestError, failures_message, golden_cases, run_selftests

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
LAUNCHER = REPO / ".cache" / "lean" / "bin" / "lean"


def rrl(
    *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{REPO}", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", *args],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def pool():
    with GradingPool(workers=1, timeout_s=20) as p:
        yield p


def test_cases_from_code_and_from_package_files():
    from governance_graders import Contains

    from graders.math import MathGrader

    cases, where = golden_cases(Contains())
    assert where == "Contains.golden_cases()" and [c.verdict for c in cases] == ["correct", "incorrect"]
    math_cases, where = golden_cases(MathGrader())
    assert where == "graders.math/selftest.jsonl" and len(math_cases) >= 6
    assert {c.verdict for c in math_cases} == {"correct", "incorrect"}  # both sides of the line are pinned


def test_bad_golden_case_is_a_clear_error():
    with pytest.raises(SelftestError, match="x line 3: verdict must be one of"):
        GoldenCase.parse({"response": "a", "ground_truth": 1, "verdict": "right"}, "x line 3")
    with pytest.raises(SelftestError, match="lacks ground_truth"):
        GoldenCase.parse({"response": "a", "verdict": "correct"}, "x")


def test_wrong_golden_case_is_listed(pool):
    results = run_selftests(["governance_graders:Contains", "governance_graders:WrongGolden"], pool)
    assert [r.ok for r in results] == [True, False]
    message = failures_message(results)
    assert message is not None
    assert (
        "wrong_golden 1 [WrongGolden.golden_cases()] case 2 (mislabelled): expected correct, got incorrect"
        in message
    )


@pytest.mark.slow
@pytest.mark.lean
def test_cli_selftest_passes_for_builtins_and_fails_for_a_bad_plugin():
    proc = rrl("graders", "selftest", env={"RRL_LEAN": str(LAUNCHER)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("math", "gsm8k", "code", "lean"):  # each built-in with its own golden cases
        assert f"│ {name}" in proc.stdout
    assert "FAIL" not in proc.stdout

    bad = rrl("graders", "selftest", "math", "governance_graders:WrongGolden")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "case 2 (mislabelled): expected correct, got incorrect" in bad.stdout
    assert "FAIL (1)" in bad.stdout

    unknown = rrl("graders", "selftest", "no_such_grader")
    assert unknown.returncode == 2 and "unknown grader 'no_such_grader'" in unknown.stderr


def test_cli_selftest_skips_lean_without_a_toolchain_and_fails_when_lean_is_named(tmp_path: Path):
    """Users bring their own Lean: on a machine without one, checking every grader passes with lean skipped
    (and why); asking for lean by name fails with the same reason instead of two error grades."""
    env = {"PATH": f"{tmp_path}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"}
    env.update({var: "" for var in ("RRL_LEAN", "RRL_LEAN_PROJECT", "LEAN_PATH")})
    every = rrl("graders", "selftest", env=env)
    assert every.returncode == 0, every.stdout + every.stderr
    assert "lean: skipped: no Lean toolchain found" in every.stdout
    assert "FAIL" not in every.stdout and "grader_exception" not in every.stdout
    named = rrl("graders", "selftest", "lean", env=env)
    assert named.returncode == 1, named.stdout + named.stderr
    assert "lean: skipped: no Lean toolchain found" in named.stdout
    assert "cannot run on this machine" in named.stderr


def test_a_run_routed_to_a_grader_that_cannot_run_here_stops_before_training(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pool
):
    """The run's own selftest does not skip: every row it sends to lean would be an error, masked out."""
    from rich.console import Console

    from reasoning_rl.trainer.governance import selftest_or_raise

    for var in ("RRL_LEAN", "RRL_LEAN_PROJECT", "LEAN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SelftestError, match="lean 2.0.0 cannot run on this machine: no Lean toolchain found"):
        selftest_or_raise(["lean", "math"], pool, Console(), {"lean": {"timeout_s": 30}})


@pytest.mark.lean
def test_a_run_selftest_runs_the_cases_with_the_runs_toolchain_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pool
):
    """A run that brings its Lean only through grading.options (no env, nothing on PATH) passes its selftest:
    the cases get the run's setup options (toolchain, sandbox), never its judgement options."""
    from rich.console import Console

    from reasoning_rl.trainer.governance import selftest_or_raise

    if not LAUNCHER.exists():
        subprocess.run(["bash", str(REPO / "scripts/services.d/30-lean.sh")], check=True, cwd=REPO)
    for var in ("RRL_LEAN", "RRL_LEAN_PROJECT", "LEAN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    # not a setup option: a budget that would turn the correct case into an error if it reached the cases
    judging = {"timeout_s": 0.01}
    options = {"lean": {"lean": str(LAUNCHER), "sandbox": "local", **judging}}
    selftest_or_raise(["lean"], pool, Console(), options)  # raises on a skip or a disagreement
    with pytest.raises(SelftestError, match="no Lean toolchain found"):
        selftest_or_raise(["lean"], pool, Console(), {"lean": judging})


@pytest.mark.slow
def test_regrade_lists_verdicts_flipped_by_a_new_grader_version(tmp_path: Path):
    rows = [
        {"id": "a", "response": "the answer is 7", "ground_truth": "7"},
        {"id": "b", "response": "7", "ground_truth": "7"},
        {"id": "c", "responses": ["7", "so 7", "8"], "ground_truth": "7"},
        {"id": "d", "response": "8", "ground_truth": "7"},
    ]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    old = (
        tmp_path / "old.jsonl"
    )  # a module:attr grader is routed by --grader (a row's `grader` names a registered one)
    proc = rrl(
        "grade",
        str(src),
        "-o",
        str(old),
        "--grader",
        "governance_graders:Versioned",
        "--no-progress",
        "--workers",
        "1",
        env={"GOV_VERSION": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {json.loads(line)["grader_version"] for line in old.read_text().splitlines()} == {"1"}
    with old.open("a") as fh:
        fh.write("not json\n")  # a damaged line is reported, not dropped

    report = tmp_path / "regrade.html"
    again = ("--grader", "governance_graders:Versioned")  # a module:attr grader loads only when named again
    proc = rrl(
        "grade",
        "--regrade",
        str(old),
        *again,
        "--report",
        str(report),
        "--workers",
        "1",
        env={"GOV_VERSION": "2"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    # row 1 ("the answer is 7") and row 3 response 1 ("so 7") were correct under v1, incorrect under v2
    assert "flipped: row 1 response 0 [versioned 1 -> 2]: correct -> incorrect" in out
    assert "flipped: row 3 response 1 [versioned 1 -> 2]: correct -> incorrect" in out
    assert out.count("flipped: row") == 2
    assert "2 verdict(s) flipped out of 6" in out
    assert "not re-graded" in out and "line 5" in out
    page = report.read_text()
    assert "versioned 1 &rarr; 2" in page and "<td>3</td><td>1</td><td>correct</td><td>incorrect</td>" in page

    same = rrl("grade", "--regrade", str(old), *again, "--workers", "1", env={"GOV_VERSION": "1"})
    assert same.returncode == 0 and "0 verdict(s) flipped out of 6" in same.stdout


def test_a_run_selftest_names_a_grader_without_golden_cases(pool) -> None:
    """Issue 30: a plugin grader with no golden cases was skipped by the pre-run selftest without a word."""
    from rich.console import Console

    from reasoning_rl.trainer.governance import selftest_or_raise

    console = Console(record=True, width=200)
    selftest_or_raise(["math", "tests.trainer.task_graders:ContainsAnswer"], pool, console, {})
    text = console.export_text()
    assert "grader selftest ok: math" in text
    assert "contains_answer 1 ship no golden cases, not checked" in text
    assert len([line for line in text.splitlines() if "no golden cases" in line]) == 1


def test_a_run_selftest_gives_a_function_reward_a_hint_a_function_can_follow(pool) -> None:
    """Issue 47 follow-up: a `{function: module:fn}` reward was told to "add a selftest.jsonl next to the
    grader", which a function has no place for; it is told to grade labelled rows with `rrl grade --grader
    function=...` (which loads it) or to wrap it in a grader class, and a plugin class keeps its own hint."""
    from rich.console import Console

    from reasoning_rl.trainer.governance import selftest_or_raise

    fn = "function=examples.verl_compute_score.compute_score:compute_score"
    console = Console(record=True, width=400)
    selftest_or_raise([fn, "tests.trainer.task_graders:ContainsAnswer"], pool, console, {})
    lines = [line for line in console.export_text().splitlines() if "no golden cases" in line]
    assert len(lines) == 2, lines
    plugin, function = sorted(lines, key=lambda line: "function " in line)
    assert (
        "contains_answer 1 ship no golden cases" in plugin and "selftest.jsonl next to the grader" in plugin
    )
    assert function.startswith(
        "grader selftest: function(s) examples.verl_compute_score.compute_score:compute_score have no golden "
        "cases, not checked"
    )
    assert f"`rrl grade ROWS.jsonl --grader {fn}`" in function
    assert "next to the grader" not in function and "wrap the function in a grader class" in function
