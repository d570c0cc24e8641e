"""The assert checks' deadline holds for C-level work driven by the answer (issue 28).

A check such as ``sum(range(candidate(1)))`` is one C call: no trace function or signal handler in the
process running it can stop it (67 s were measured against a 3 s budget). The checks now run in helper
processes the grader kills at the deadline, and such a run is the answer's time-out: ``incorrect``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from graders.code import CodeGrader
from tests.graders.code_helpers import fenced

BUDGET_S = 3.0
# A hang guard, not a speed test: the grace after the deadline, a fresh helper's start-up to tell load from the
# answer and the sandbox all stretch on a loaded 2-core box; unbounded, these checks ran for minutes (67 s+).
SLACK_S = 27.0


@pytest.fixture(scope="module")
def grader() -> Iterator[CodeGrader]:
    g = CodeGrader()
    yield g
    g.close()


def check(body: str) -> dict[str, str]:
    return {"entry_point": "f", "test": f"def check(candidate):\n    {body}\n"}


C_LEVEL = {
    "sum_range": ("assert sum(range(candidate(1))) >= 0", "return 10**11"),
    "big_power": ("assert 7 ** candidate(1) % 10 >= 0", "return 10**9"),
    "regex_backtrack": (
        "import re\n    assert not re.match(r'(a+)+$', candidate(1))",
        "return 'a' * 64 + 'b'",
    ),
    "sorted_huge": ("assert sorted(range(candidate(1), 0, -1))[0] == 1", "return 10**10"),
    "str_of_huge_int": ("assert len(str(10 ** candidate(1))) > 0", "return 10**8"),
}


@pytest.mark.parametrize("name", sorted(C_LEVEL))
def test_c_level_check_work_driven_by_the_answer_stops_at_the_deadline(grader: CodeGrader, name: str) -> None:
    body, answer = C_LEVEL[name]
    honest = grader.grade(fenced("def f(x):\n    return 3"), check(body.replace("candidate(1)", "candidate(1) and 3")),
                          sandbox="local", timeout_s=2, total_timeout_s=BUDGET_S)  # fmt: skip
    assert honest.verdict in ("correct", "incorrect"), honest
    started = time.monotonic()
    g = grader.grade(fenced(f"def f(x):\n    {answer}"), check(body), sandbox="local", timeout_s=2,
                     total_timeout_s=BUDGET_S)  # fmt: skip
    elapsed = time.monotonic() - started
    assert (g.verdict, g.score) == ("incorrect", 0.0), g
    assert g.details.get("response_fault") is True or g.reason.endswith("tests passed"), g
    assert elapsed < BUDGET_S + SLACK_S, (name, elapsed, g)


def test_the_checks_still_pass_and_fail_as_written(grader: CodeGrader) -> None:
    gt = check("assert candidate(2) == 4 and sum(range(candidate(3))) == 36")
    ok = grader.grade(
        fenced("def f(x):\n    return x * x"), gt, sandbox="local", timeout_s=2, total_timeout_s=BUDGET_S
    )
    assert ok.verdict == "correct", ok
    bad = grader.grade(
        fenced("def f(x):\n    return x + x"), gt, sandbox="local", timeout_s=2, total_timeout_s=BUDGET_S
    )
    assert bad.verdict == "incorrect" and "AssertionError" in str(bad.details), bad
