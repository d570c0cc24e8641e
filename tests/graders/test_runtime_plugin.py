"""examples/custom_grader really pip-installs, registers by entry point and grades in pool workers.

A copy is pip-installed into a temporary target directory (neither the source tree nor the shared .venv
changes), which is then used through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "examples" / "custom_grader"

POOL_SNIPPET = """
from graders.runtime import GradeRequest, GradingPool
with GradingPool(workers=1, backend="process", cache_path={cache!r}) as pool:
    grades = pool.grade_batch([GradeRequest("exact_answer", "Answer: 42", "42"),
                               GradeRequest("exact_answer", "Answer: 41", "42")])
    print([g.verdict for g in grades])
"""


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    target = tmp_path_factory.mktemp("plugin_site")
    source = tmp_path_factory.mktemp("plugin_src") / "custom_grader"
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), str(REPO)]))


@pytest.mark.slow
def test_plugin_is_listed_and_its_own_tests_pass(plugin_env: dict[str, str]) -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "graders", "list", "--json"],
        env=plugin_env,
        capture_output=True,
        text=True,
        check=True,
    )
    info = {g["name"]: g for g in json.loads(listed.stdout)}
    assert info["exact_answer"]["version"] == "0.1.0"
    assert info["exact_answer"]["provider"] == "rrl-exact-answer"
    assert info["exact_answer"]["status"] == "ok"
    own = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PLUGIN / "tests")],
        env=plugin_env,
        capture_output=True,
        text=True,
        cwd=PLUGIN,
    )
    assert own.returncode == 0, own.stdout + own.stderr


@pytest.mark.slow
def test_plugin_grades_by_name_in_pool_workers(plugin_env: dict[str, str], tmp_path: Path) -> None:
    code = POOL_SNIPPET.format(cache=str(tmp_path / "c.sqlite"))
    out = subprocess.run(
        [sys.executable, "-c", code], env=plugin_env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "['correct', 'incorrect']"


@pytest.mark.slow
def test_installed_plugin_ships_its_golden_cases(plugin_env: dict[str, str]) -> None:
    """selftest.jsonl travels as package data: `rrl graders selftest exact_answer` finds and passes it."""
    proc = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "graders", "selftest", "exact_answer"],
        env=plugin_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rrl_exact_answer/selftest.jsonl" in proc.stdout and "│ 4 " in proc.stdout
