"""Our stdin/stdout and call-based suites (tests/graders/data, >= 20 problems, >= 5 tests each): reference
solutions pass, wrong ones fail; the per-problem options (float tolerance, case policy) are exercised."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from graders.code import CodeGrader
from graders.types import Grade
from sandboxes.types import Sandbox
from tests.graders.code_helpers import docker_sandbox, fenced

pytestmark = pytest.mark.docker
DATA = Path(__file__).parent / "data"
WORKERS = 3


def _load(name: str) -> list[dict[str, Any]]:
    return json.loads((DATA / f"code_{name}_suite.json").read_text())


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    yield from docker_sandbox(pool_size=WORKERS)


def _grade_many(
    sb: Sandbox, jobs: list[tuple[str, str, dict[str, Any], dict[str, Any]]]
) -> list[tuple[str, Grade]]:
    grader = CodeGrader()
    with ThreadPoolExecutor(WORKERS) as ex:
        return list(ex.map(lambda j: (j[0], grader.grade(fenced(j[1]), j[2], sandbox=sb, **j[3])), jobs))


@pytest.mark.parametrize("suite", ["stdio", "call"])
def test_suite_shape(suite: str) -> None:
    problems = _load(suite)
    assert len(problems) >= 20
    for p in problems:
        assert len(p["ground_truth"]["inputs"]) >= 5 and p["wrong"], p["name"]


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["stdio", "call"])
def test_reference_solutions_pass_and_wrong_ones_fail(sb: Sandbox, suite: str) -> None:
    problems = _load(suite)
    jobs = [(f"{p['name']}:ref", p["reference"], p["ground_truth"], p["options"]) for p in problems]
    jobs += [
        (f"{p['name']}:wrong{i}", w, p["ground_truth"], p["options"])
        for p in problems
        for i, w in enumerate(p["wrong"])
    ]
    results = dict(_grade_many(sb, jobs))
    bad_refs = {
        k: (g.verdict, g.reason, g.details)
        for k, g in results.items()
        if k.endswith(":ref") and g.verdict != "correct"
    }
    passing_wrong = {
        k: g.reason for k, g in results.items() if ":wrong" in k and (g.verdict != "incorrect" or g.score)
    }
    assert not bad_refs
    assert not passing_wrong


def test_options_change_the_verdict(sb: Sandbox) -> None:
    problems = {p["name"]: p for p in _load("stdio")}
    grader = CodeGrader()
    prime = problems["is_prime"]
    upper = prime["reference"].replace("'no'", "'NO'")
    assert (
        grader.grade(fenced(upper), prime["ground_truth"], sandbox=sb, case="insensitive").verdict
        == "correct"
    )
    assert grader.grade(fenced(upper), prime["ground_truth"], sandbox=sb).verdict == "incorrect"
    avg = problems["average"]
    rounded = avg["reference"].replace("print(sum(xs) / len(xs))", "print('%.9f' % (sum(xs) / len(xs)))")
    assert grader.grade(fenced(rounded), avg["ground_truth"], sandbox=sb, float_tol=1e-6).verdict == "correct"
    assert grader.grade(fenced(rounded), avg["ground_truth"], sandbox=sb).verdict == "incorrect"


def test_fraction_scoring_and_per_test_details(sb: Sandbox) -> None:
    gt = {"inputs": ["1\n", "2\n", "3\n", "4\n"], "outputs": ["1\n", "4\n", "9\n", "0\n"]}
    code = "n = int(input())\nprint(n * n)"
    grader = CodeGrader()
    all_or_nothing = grader.grade(fenced(code), gt, sandbox=sb)
    fraction = grader.grade(fenced(code), gt, sandbox=sb, score="fraction")
    assert (all_or_nothing.score, all_or_nothing.verdict) == (0.0, "incorrect")
    assert (fraction.score, fraction.verdict) == (0.75, "incorrect")
    assert [t["passed"] for t in fraction.details["tests"]] == [True, True, True, False]
