"""The ``code`` grader: extract the program, run every test of it in ONE sandbox use (one harness process
per test inside), compare decoded results in this trusted process. Sandbox failures are ``error``, never 0."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graders.code.asserts import MAX_ROUNDS, AssertRun
from graders.code.compare import output_matches
from graders.code.extract import extract_code
from graders.code.options import CodeOptions
from graders.code.suites import AssertSuite, CallSuite, GroundTruthError, StdioSuite, parse_suite
from graders.code.values import Unserialisable, decode, encode, values_equal
from graders.types import Grade
from sandboxes import Limits, RunRequest, Sandbox, open_sandbox

HARNESS_SOURCE = (Path(__file__).parent / "_harness.py").read_text()
_STARTUP_S = 3.0  # sandbox + interpreter start-up on top of the tests' own budget
_MAX_SANDBOX_OUTPUT = 64 << 20


@dataclass(frozen=True, slots=True)
class _Verdict:
    """Not a grade yet: the harness run ended the submission early (``grade``) or gave per-test outcomes."""

    outcomes: list[dict[str, Any]] | None = None
    grade: Grade | None = None
    timing: dict[str, float] | None = None  # sandbox_s: whole sandbox use; tests_s: the tests' own run time


class CodeGrader:
    """Grades Python programs against stdin/stdout, call-based or assert-based tests."""

    name = "code"
    version = "1.0.0"

    def __init__(self) -> None:
        self._sandboxes: dict[str, Sandbox] = {}
        self._lock = threading.Lock()

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError for bad options (``rrl grade`` asks once, before grading any row)."""
        CodeOptions.parse(options)

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        opts = CodeOptions.parse(options)
        try:
            suite = parse_suite(ground_truth)
        except GroundTruthError as exc:
            return Grade.error(f"ground truth: {exc}")
        code = extract_code(response, opts.extract)
        if code is None or not code.strip():
            return Grade.incorrect("no code block in the response", extract=opts.extract)
        if isinstance(suite, StdioSuite):
            return self._grade_stdio(code, suite, opts)
        if isinstance(suite, CallSuite):
            return self._grade_call(code, suite, opts)
        return self._grade_asserts(code, suite, opts)

    # -- the three formats -------------------------------------------------------------------------------
    def _grade_stdio(self, code: str, suite: StdioSuite, opts: CodeOptions) -> Grade:
        run = self._harness(opts, "stdio", code, "", list(suite.inputs))
        if run.outcomes is None:
            assert run.grade is not None
            return run.grade
        passed = []
        for outcome, expected in zip(run.outcomes, suite.outputs, strict=True):
            ok = outcome["status"] == "ok" and output_matches(
                str(outcome.get("stdout", "")), expected, float_tol=opts.float_tol, case=opts.case)
            passed.append(ok)
        return _score(passed, run.outcomes, opts, run.timing)

    def _grade_call(self, code: str, suite: CallSuite, opts: CodeOptions) -> Grade:
        try:
            tests = [{"args": encode(list(args)), "kwargs": {"dict": []}} for args in suite.inputs]
        except Unserialisable as exc:
            return Grade.error(f"ground truth: inputs use an unsupported type ({exc})")
        run = self._harness(opts, "call", code, suite.fn_name, tests)
        if run.outcomes is None:
            assert run.grade is not None
            return run.grade
        passed = [_call_passed(o, expected, opts.float_tol) for o, expected in zip(run.outcomes, suite.outputs, strict=True)]
        return _score(passed, run.outcomes, opts, run.timing)

    def _grade_asserts(self, code: str, suite: AssertSuite, opts: CodeOptions) -> Grade:
        if suite.setup and not re.search(rf"\bdef\s+{re.escape(suite.entry_point)}\b", code):
            code = suite.setup + code  # a completion of the prompt (HumanEval style), not a whole program
        run = AssertRun(suite)
        try:
            calls = run.record()
        except SyntaxError as exc:
            return Grade.error(f"ground truth: test code is not Python: {exc}")
        n_calls = 0
        timing = {"sandbox_s": 0.0, "tests_s": 0.0}
        for _ in range(MAX_ROUNDS):
            if calls:
                try:
                    tests = [{"args": encode(list(a)), "kwargs": encode(k)} for a, k in calls]
                except Unserialisable as exc:
                    return Grade.error(f"ground truth: the check passes an unsupported argument type ({exc})")
                result = self._harness(opts, "call", code, suite.entry_point, tests)
                if result.outcomes is None:
                    assert result.grade is not None
                    return result.grade
                run.add(calls, result.outcomes)
                n_calls += len(calls)
                for key, value in (result.timing or {}).items():
                    timing[key] += value
            verdicts, calls = run.judge()
            if not calls:
                break
        else:
            return Grade.error(f"the check kept making new calls after {MAX_ROUNDS} rounds")
        outcomes = [{"status": "ok" if v is None else "failed", "calls": n_calls,
                     **({} if v is None else {"error": f"{type(v).__name__}: {v}"[:300]})} for v in verdicts]
        return _score([v is None for v in verdicts], outcomes, opts, timing)

    # -- the sandbox -------------------------------------------------------------------------------------
    def _harness(self, opts: CodeOptions, mode: str, code: str, fn_name: str, tests: list[Any]) -> _Verdict:
        request = {"mode": mode, "code": code, "fn_name": fn_name, "tests": tests, "per_test_s": opts.timeout_s,
                   "total_s": opts.total_timeout_s, "output_cap": opts.output_cap,
                   # all-or-nothing: a crashed or timed-out test already decides the grade
                   "stop_on_failure": opts.score == "all"}
        out_cap = min(6 * len(tests) * opts.output_cap + (1 << 20), _MAX_SANDBOX_OUTPUT)
        limits = Limits(wall_s=opts.total_timeout_s + _STARTUP_S, memory_mb=opts.memory_mb, output_bytes=out_cap)
        result = self._sandbox(opts.sandbox).run(RunRequest(
            ["python3", "-I", "-S", "harness.py"], files={"harness.py": HARNESS_SOURCE},
            stdin=json.dumps(request, ensure_ascii=False).encode(), limits=limits))
        if result.stopped_by == "sandbox_error":
            return _Verdict(grade=Grade.error(f"sandbox: {result.detail}", sandbox=getattr(opts.sandbox, "name",
                                                                                           opts.sandbox)))
        if result.stopped_by != "exit" or result.exit_code != 0:
            why = result.detail or result.stderr[-300:].decode("utf-8", "replace")
            return _Verdict(grade=Grade.incorrect(f"the submission broke the test run ({result.stopped_by}): {why}",
                                                  stopped_by=result.stopped_by, exit_code=result.exit_code))
        outcomes = _parse_outcomes(result.stdout, len(tests))
        if outcomes is None:
            return _Verdict(grade=Grade.incorrect("the test harness output was tampered with or cut short"))
        tests_s = sum(float(o.get("time_s") or 0.0) for o in outcomes if isinstance(o.get("time_s"), int | float))
        return _Verdict(outcomes=outcomes, timing={"sandbox_s": result.wall_s, "tests_s": tests_s})

    def _sandbox(self, sandbox: str | Sandbox) -> Sandbox:
        """One sandbox per backend name for this grader's lifetime, so Docker's warm pool is reused."""
        if not isinstance(sandbox, str):
            return sandbox
        with self._lock:
            if sandbox not in self._sandboxes:
                self._sandboxes[sandbox] = open_sandbox(sandbox)
            return self._sandboxes[sandbox]

    def close(self) -> None:
        with self._lock:
            for sandbox in self._sandboxes.values():
                sandbox.close()
            self._sandboxes.clear()


def _parse_outcomes(stdout: bytes, n: int) -> list[dict[str, Any]] | None:
    """The harness's JSON, validated: exactly ``n`` result objects with a string status."""
    try:
        data = json.loads(stdout)
    except (ValueError, RecursionError):
        return None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or len(results) != n:
        return None
    if not all(isinstance(r, dict) and isinstance(r.get("status"), str) for r in results):
        return None
    return results


def _call_passed(outcome: dict[str, Any], expected: Any, float_tol: float | None) -> bool:
    if outcome["status"] != "ok":
        return False
    try:
        got = decode(outcome.get("value"))
    except (ValueError, TypeError, RecursionError):
        outcome["status"] = "malformed"
        return False
    if values_equal(got, expected, float_tol):
        return True
    # APPS call-based outputs wrap the return value in a one-element list.
    return isinstance(expected, list) and len(expected) == 1 and values_equal(got, expected[0], float_tol)


def _score(passed: list[bool], outcomes: list[dict[str, Any]], opts: CodeOptions,
           timing: dict[str, float] | None) -> Grade:
    tests = [
        {"passed": ok, "status": o.get("status"), "time_s": round(float(o.get("time_s", 0.0) or 0.0), 4),
         **({"error": str(o.get("error", ""))[-300:]} if not ok and o.get("error") else {})}
        for ok, o in zip(passed, outcomes, strict=True)
    ]
    n_pass, n = sum(passed), len(passed)
    reason = f"{n_pass}/{n} tests passed"
    details = {"tests": tests, "timing": {k: round(v, 4) for k, v in (timing or {}).items()}}
    if n_pass == n:
        return Grade.correct(reason, **details)
    score = n_pass / n if opts.score == "fraction" else 0.0
    return Grade(score, "incorrect", reason, details)
