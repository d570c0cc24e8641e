"""The correct / incorrect / error rule for the math grader (see ``graders.types.Grade``).

What the prediction causes (guards firing on it, its nesting, it alone exhausting the SymPy budget or memory)
is ``incorrect``: a policy must not be able to dodge the penalty by forcing ``error``, which training masks.
``error`` stays for the gold, the helpers and grader bugs.
"""

from __future__ import annotations

import threading
import time

import pytest

from graders.math import MathGrader
from graders.math.worker import WorkerCrashed

BUDGET_S = 1.0


@pytest.fixture(scope="module")
def grader() -> MathGrader:
    g = MathGrader(max_workers=2)
    g.pool.warm(2)
    return g


RESPONSE_FAULTS = [
    ("\\boxed{10^{10^{10^{10}}}}", "exponent tower"),
    ("\\boxed{2^{" + "2^{" * 50 + "2" + "}" * 51 + "}", "exponent tower"),
    ("\\boxed{7^{123456789}}", "power with too many digits"),
    ("\\boxed{99999!}", "huge factorial"),
    ("\\boxed{1" + "0" * 5500 + "}", "answer longer than 5000 characters"),
    ("\\boxed{" + "\\frac{1}{" * 200 + "1" + "}" * 200 + "}", "answer longer than 2000 characters"),
    ("\\boxed{" + "(" * 300 + "x" + ")" * 300 + "}", "budget exhausted"),  # SymPy's parser recurses
    ("\\boxed{(x+y+z+w)^{40}}", "budget exhausted"),  # passes every guard; SymPy expands for minutes
]


@pytest.mark.parametrize(("response", "cause"), RESPONSE_FAULTS, ids=[c for _, c in RESPONSE_FAULTS])
def test_what_the_prediction_causes_is_incorrect(grader: MathGrader, response: str, cause: str) -> None:
    grader.pool.warm(2)
    result = grader.grade(response, "5", timeout_s=BUDGET_S)
    assert (result.verdict, result.score) == ("incorrect", 0.0), result
    assert result.details["cause"] == cause and result.details["response_fault"] is True
    masked = grader.grade(response, "5", timeout_s=BUDGET_S, mask_response_faults=True)
    assert masked.verdict == "error" and masked.reason == result.reason, masked


@pytest.mark.parametrize(
    ("gold", "reason"),
    [("10^{10^{10^{10}}}", "ground truth too expensive to judge"),
     ("1" * 6000, "ground-truth answer longer than 5000 characters")],
)  # fmt: skip
def test_an_ungradable_gold_is_an_error(grader: MathGrader, gold: str, reason: str) -> None:
    result = grader.grade("\\boxed{x+1}", gold, timeout_s=BUDGET_S)
    assert (result.verdict, result.reason) == ("error", reason), result


@pytest.mark.parametrize("gold", ["\\frac{1}{", "x^{", "1 +* 2"])
def test_a_gold_that_does_not_parse_is_an_error(grader: MathGrader, gold: str) -> None:
    """No prediction can be judged against it: `error` (masked), not a zero for every sample."""
    result = grader.grade("\\boxed{x+1}", gold, timeout_s=5.0)
    assert (result.verdict, result.reason) == ("error", "could not judge: ground truth does not parse"), (
        result
    )
    assert (
        grader.grade("\\boxed{\\frac{1}{}", "x+1", timeout_s=5.0).verdict == "incorrect"
    )  # a bad prediction


def test_a_gold_that_alone_exhausts_the_budget_is_an_error(grader: MathGrader) -> None:
    """The pair timed out, and so does the gold's own share of the work: the gold cannot be judged."""
    grader.pool.warm(2)
    result = grader.grade("\\boxed{(x+y+z+w)^{39}}", "(x+y+z+w)^{40}", timeout_s=BUDGET_S)
    assert (result.verdict, result.reason) == ("error", "ground truth too expensive to judge"), result
    grader.pool.warm(2)
    cheap_gold = grader.grade("\\boxed{(x+y+z+w)^{40}}", "x+y+z+w", timeout_s=BUDGET_S)
    assert (cheap_gold.verdict, cheap_gold.reason) == ("incorrect", "timeout"), cheap_gold


def test_a_timeout_while_every_helper_is_busy_is_load_not_the_answer() -> None:
    grader = MathGrader(max_workers=1)
    grader.pool.warm(1)
    try:
        blocker = threading.Thread(
            target=grader.grade, args=("\\boxed{(x+y+z+w)^{40}}", "5"), kwargs={"timeout_s": 3.0}
        )
        blocker.start()
        deadline = time.monotonic() + 60  # a hang guard only
        # until the only helper is expanding the blow-up (counted busy and taken): waited for, not slept on
        while grader._busy < 1 or grader.pool._idle:
            assert time.monotonic() < deadline, "the blow-up never took the helper"
            time.sleep(0.01)
        # saturation is judged as the call starts: the helper stays busy for the blocker's 3 s, far past 0.5 s
        result = grader.grade("\\boxed{\\sin^2 x + \\cos^2 x}", "1", timeout_s=0.5)
        blocker.join()
        assert (result.verdict, result.reason) == ("error", "timeout: grader saturated"), result
    finally:
        grader.pool.close()


def test_helpers_that_cannot_run_are_an_error_not_the_answer(
    grader: MathGrader, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(request: object, budget_s: float) -> dict[str, object]:
        raise WorkerCrashed

    monkeypatch.setattr(grader.pool, "run", crash)
    result = grader.grade("\\boxed{\\sin^2 x + \\cos^2 x}", "1", timeout_s=BUDGET_S)
    assert (result.verdict, result.reason) == ("error", "could not judge: no helper"), result
