"""Who is to blame when Lean stops without a verdict: the response (``incorrect``) whenever the trusted part of
the file (header, statement preamble) compiles alone, whatever the response put before its theorem; ``error``
only when the trusted part itself fails. The marker Lean prints after the trusted part is not enough: the
response's helper theorems can keep every Lean worker thread busy, and then Lean reports no message at all."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from graders.lean import LeanGrader
from graders.lean.grader import DRIVER
from sandboxes import RunRequest, RunResult
from tests.graders.test_lean_grader import LE_SUCC, LOOP, lean  # noqa: F401 - `lean` is a fixture

pytestmark = pytest.mark.lean

HELPER_PROOF = (
    "theorem h (n : N) : Le n n := Le.refl n\ntheorem le_succ (n : N) : Le n (N.succ n) := Le.step (h n)"
)
MARKER: dict[str, object] = {
    "severity": "information",
    "data": "rrl: the proof follows",
    "pos": {"line": 5, "column": 0},
}


def _frame(
    exit_code: int | None, stderr: str = "", messages: tuple[dict[str, object], ...] = ()
) -> RunResult:
    proof = {"exit": exit_code, "timed_out": exit_code is None, "wall_s": 1.0, "stderr": stderr,
             "stdout": "".join(json.dumps(m) + "\n" for m in messages), "confined": True}  # fmt: skip
    line = "rrl-lean-audit " + json.dumps({"proof": proof, "audit": None}) + "\n"
    return RunResult(line.encode(), b"", 0, 1.0, "exit")


class ScriptedSandbox:
    """Answers the compile run of the whole file with ``fault`` (no message shown, as when every Lean thread is
    busy) and the run of the trusted part alone with ``prologue``; records what each run was given."""

    name, isolation = "scripted", "strong"

    def __init__(self, fault: RunResult, prologue: RunResult) -> None:
        self.fault, self.prologue = fault, prologue
        self.files: list[tuple[str, str]] = []

    def run(self, request: RunRequest) -> RunResult:
        config = json.loads(request.files["rrl_lean_driver.json"])
        self.files.append((str(request.files["Proof.lean"]), config["audit"]))
        assert DRIVER in request.files
        return self.fault if config["audit"] else self.prologue

    def close(self) -> None:
        pass


@pytest.fixture
def grader() -> Iterator[LeanGrader]:
    g = LeanGrader()
    yield g
    g.close()


@pytest.mark.parametrize(
    ("fault", "reason"),
    [(_frame(None), "timeout"),
     (_frame(134, "Stack overflow detected. Aborting."), "stack overflow"),
     (_frame(137), "lean crashed (exit code 137)")],
)  # fmt: skip
def test_a_stop_without_the_marker_is_the_responses_when_the_trusted_part_compiles(
    grader: LeanGrader,
    lean: str,  # noqa: F811 - the fixture
    fault: RunResult,
    reason: str,
) -> None:
    sandbox = ScriptedSandbox(fault, _frame(0, messages=(MARKER,)))
    result = grader.grade(HELPER_PROOF, LE_SUCC, lean=lean, sandbox=sandbox)
    assert (result.verdict, result.reason) == ("incorrect", reason), result
    assert result.details["response_fault"] is True
    (whole, _), (alone, audit) = sandbox.files
    assert audit == "" and "theorem h" not in alone and whole.startswith(alone), alone  # trusted text only
    # Remembered: the next such stop under the same header needs no second run.
    grader.grade(HELPER_PROOF, LE_SUCC, lean=lean, sandbox=sandbox)
    assert len(sandbox.files) == 3


@pytest.mark.parametrize("prologue", [_frame(None), _frame(1, messages=(MARKER,)), _frame(0)])
def test_a_stop_is_an_error_when_the_trusted_part_alone_fails_too(
    grader: LeanGrader,
    lean: str,  # noqa: F811 - the fixture
    prologue: RunResult,
) -> None:
    sandbox = ScriptedSandbox(_frame(None), prologue)
    result = grader.grade(HELPER_PROOF, LE_SUCC, lean=lean, sandbox=sandbox)
    assert (result.verdict, result.reason) == ("error", "timeout before the proof was reached"), result


def test_the_marker_comes_before_the_responses_helpers(
    grader: LeanGrader,
    lean: str,  # noqa: F811 - the fixture
) -> None:
    sandbox = ScriptedSandbox(_frame(0, messages=(MARKER,)), _frame(0))
    grader.grade(HELPER_PROOF, LE_SUCC, lean=lean, sandbox=sandbox)
    whole = sandbox.files[0][0]
    assert whole.index('#print "rrl: the proof follows"') < whole.index("theorem h")


@pytest.mark.slow
def test_helpers_that_keep_every_lean_thread_busy_are_incorrect(
    grader: LeanGrader,
    lean: str,  # noqa: F811 - the fixture
) -> None:
    """Four never-ending helper theorems occupy Lean's worker threads, so it shows nothing before the clock
    stops it (the first review's penalty evasion, through helpers): the response's time-out, ``incorrect``."""
    truth = {"statement": "theorem t : C N.zero", "header": LOOP}
    helpers = "".join(f"theorem helper{i} : C N.zero := inst\n" for i in range(4))
    result = grader.grade(
        helpers + "theorem t : C N.zero := inst", truth, lean=lean, sandbox="local", timeout_s=3
    )
    assert (result.verdict, result.reason) == ("incorrect", "timeout"), result
    assert result.details["response_fault"] is True
