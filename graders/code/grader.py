"""The ``code`` grader: extract the program, run every test of it in ONE sandbox use (one harness process
per test inside), compare decoded results in this trusted process.

Verdicts follow the ``Grade`` rule: whatever the RESPONSE causes (no code, a crash, a time-out, too much output
or memory, a tampered or unusable result, a check that never settles) is ``incorrect`` with the reason;
``error`` is only the infrastructure (the sandbox could not start or failed) or an ungradable ground truth."""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from graders.code.asserts import MAX_ROUNDS
from graders.code.check_worker import GRACE_S, CheckPool
from graders.code.compare import output_matches
from graders.code.extract import extract_code
from graders.code.options import CodeOptions
from graders.code.outcomes import parse_outcomes
from graders.code.suites import AssertSuite, CallSuite, GroundTruthError, StdioSuite, parse_suite
from graders.code.values import Unserialisable, encode, encoded_equal
from graders.runtime.helper_pool import WorkerCrashed, WorkerTimeout
from graders.types import Grade
from sandboxes import Limits, RunRequest, Sandbox, SandboxError, open_sandbox

HARNESS_SOURCE = (Path(__file__).parent / "_harness.py").read_text()
_STARTUP_S = 3.0  # sandbox + interpreter start-up on top of the tests' own budget
_MAX_SANDBOX_OUTPUT = 256 << 20
_CAP_SLACK = 64 << 10
_PROBE_S = 30.0  # a fresh check helper's start-up and one trivial answer  # a test's output cap is max(output_cap, 4 x its expected output + this)


@dataclass(frozen=True, slots=True)
class _Verdict:
    """Not a grade yet: the harness run ended the submission early (``grade``) or gave per-test outcomes."""

    outcomes: list[dict[str, Any]] | None = None
    grade: Grade | None = None
    timing: dict[str, float] | None = None  # sandbox_s: whole sandbox use; tests_s: the tests' own run time


class CodeGrader:
    """Grades Python programs against stdin/stdout, call-based or assert-based tests."""

    name = "code"
    version = "2.0.0"  # 2: failed calls never satisfy a check, dependent calls, in-place mutation, subclasses

    def __init__(self) -> None:
        self._sandboxes: dict[str, Sandbox] = {}
        self._lock = threading.Lock()
        self._checks = CheckPool()
        self._checks_busy = 0  # check passes in flight: a time-out while every helper was taken may be load

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError for bad options (``rrl grade`` asks once, before grading any row)."""
        CodeOptions.parse(options)

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        opts = CodeOptions.parse(options)
        try:
            suite = parse_suite(ground_truth)
        except GroundTruthError as exc:
            return Grade.error(f"ground truth: {exc}")
        entry = suite.entry_point if isinstance(suite, AssertSuite) else getattr(suite, "fn_name", None)
        code = extract_code(response, opts.extract, entry)
        if code is None or not code.strip():
            return Grade.incorrect("no code block in the response", extract=opts.extract)
        if isinstance(suite, StdioSuite):
            return self._grade_stdio(code, suite, opts)
        if isinstance(suite, CallSuite):
            return self._grade_call(code, suite, opts)
        return self._grade_asserts(code, suite, opts)

    # -- the three formats -------------------------------------------------------------------------------
    def _grade_stdio(self, code: str, suite: StdioSuite, opts: CodeOptions) -> Grade:
        caps = [_cap(opts, len(out.encode("utf-8", "surrogatepass"))) for out in suite.outputs]
        run = self._harness(opts, "stdio", code, "", list(suite.inputs), caps)
        if run.outcomes is None:
            assert run.grade is not None
            return run.grade
        passed = []
        for outcome, expected in zip(run.outcomes, suite.outputs, strict=True):
            ok = outcome["status"] == "ok" and output_matches(
                str(outcome.get("stdout", "")), expected, float_tol=opts.float_tol, case=opts.case
            )
            passed.append(ok)
        return _score(passed, run.outcomes, opts, run.timing)

    def _grade_call(self, code: str, suite: CallSuite, opts: CodeOptions) -> Grade:
        try:
            tests = [{"args": encode(list(args)), "kwargs": {"dict": []}} for args in suite.inputs]
            caps = [_cap(opts, len(json.dumps(encode(out)))) for out in suite.outputs]
        except Unserialisable as exc:
            return Grade.error(f"ground truth: inputs or outputs use an unsupported type ({exc})")
        run = self._harness(opts, "call", code, suite.fn_name, tests, caps)
        if run.outcomes is None:
            assert run.grade is not None
            return run.grade
        passed = [
            _call_passed(o, expected, opts.float_tol)
            for o, expected in zip(run.outcomes, suite.outputs, strict=True)
        ]
        return _score(passed, run.outcomes, opts, run.timing)

    def _grade_asserts(self, code: str, suite: AssertSuite, opts: CodeOptions) -> Grade:
        if suite.setup and not re.search(rf"\bdef\s+{re.escape(suite.entry_point)}\b", code):
            code = suite.setup + code  # a completion of the prompt (HumanEval style), not a whole program
        # one budget for the tests and the checks of all rounds; the sandbox's own start-up is not charged
        deadline = time.monotonic() + opts.total_timeout_s
        outcomes: dict[str, dict[str, Any]] = {}
        step = self._checks_pass(suite, outcomes, "record", deadline, opts)
        if isinstance(step, Grade):
            return step
        _, calls = step
        n_calls = 0
        timing = {"sandbox_s": 0.0, "tests_s": 0.0}
        for _ in range(MAX_ROUNDS):
            if calls:
                left = deadline - time.monotonic()
                if left <= 0:
                    return Grade.incorrect(
                        f"time limit of {opts.total_timeout_s} s reached after {n_calls} calls", calls=n_calls
                    )
                tests = [{"args": args, "kwargs": kwargs} for _, args, kwargs in calls]
                result = self._harness(
                    opts, "call", code, suite.entry_point, tests, [opts.output_cap] * len(tests), total_s=left
                )
                if result.outcomes is None:
                    assert result.grade is not None
                    return result.grade
                outcomes.update((key, o) for (key, _, _), o in zip(calls, result.outcomes, strict=True))
                n_calls += len(calls)
                round_timing = result.timing or {}
                deadline += max(0.0, round_timing.get("sandbox_s", 0.0) - round_timing.get("tests_s", 0.0))
                for key, value in round_timing.items():
                    timing[key] += value
            step = self._checks_pass(suite, outcomes, "judge", deadline, opts)
            if isinstance(step, Grade):
                return step
            verdicts, calls = step
            if not calls:
                break
        else:  # only answers that keep changing the check's next arguments get here (a correct one settles)
            return Grade.incorrect(
                f"the check kept making new calls after {MAX_ROUNDS} rounds", calls=n_calls
            )
        outcomes_out = [
            {
                "status": "ok" if v is None else "failed",
                "calls": n_calls,
                **({} if v is None else {"error": f"{v[0]}: {v[1]}"[:300]}),
            }
            for v in verdicts
        ]
        return _score([v is None for v in verdicts], outcomes_out, opts, timing)

    def _checks_pass(
        self,
        suite: AssertSuite,
        outcomes: dict[str, dict[str, Any]],
        which: str,
        deadline: float,
        opts: CodeOptions,
    ) -> tuple[list[list[str] | None], list[list[Any]]] | Grade:
        """One record/judge pass of the checks in a helper killed at ``deadline`` (``graders.code.check_worker``):
        (verdicts, the calls still to run), or the grade that pass decided."""
        budget_s = max(deadline - time.monotonic(), 0.0)
        request = {"suite": asdict(suite), "outcomes": outcomes, "pass": which, "budget_s": budget_s}
        with self._lock:
            saturated = self._checks_busy >= self._checks.max_workers
            self._checks_busy += 1
        try:
            reply = self._checks.run(request, budget_s + GRACE_S)
        except (WorkerTimeout, WorkerCrashed) as exc:
            if saturated or not self._check_helpers_work():
                return Grade.error(
                    f"check helpers unavailable ({type(exc).__name__}; saturated: {saturated})"
                )
            if isinstance(exc, WorkerCrashed):
                return Grade.response_fault("the checks crashed on the submission's values", cause="memory")
            return Grade.response_fault(
                f"the checks ran past the time limit of {opts.total_timeout_s} s (stopped from outside)",
                cause="timeout",
            )
        finally:
            with self._lock:
                self._checks_busy -= 1
        if reply.get("error") == "memory":  # the checks' work on the answer's values ran out of memory
            return Grade.response_fault(
                "the checks ran out of memory on the submission's values", cause="memory"
            )
        if not reply.get("ok"):
            return Grade.error(f"check helper: {reply.get('error')}")
        if "ground_truth" in reply:
            return Grade.error(f"ground truth: {reply['ground_truth']}")
        return list(reply["verdicts"]), list(reply["calls"])

    def _check_helpers_work(self) -> bool:
        """After a helper was killed or died: does a fresh one answer? (If not, it is the helpers, not the
        answer, and blaming the answer would turn an outage into silent zero rewards.)"""
        try:
            return bool(self._checks.run({"probe": True}, _PROBE_S).get("ok"))
        except (WorkerTimeout, WorkerCrashed):
            return False

    # -- the sandbox -------------------------------------------------------------------------------------
    def _harness(
        self,
        opts: CodeOptions,
        mode: str,
        code: str,
        fn_name: str,
        tests: list[Any],
        caps: list[int],
        total_s: float | None = None,
    ) -> _Verdict:
        total_s = opts.total_timeout_s if total_s is None else total_s
        request = {
            "mode": mode,
            "code": code,
            "fn_name": fn_name,
            "tests": tests,
            "per_test_s": opts.timeout_s,
            "total_s": total_s,
            "output_caps": caps,
            # all-or-nothing: a crashed or timed-out test already decides the grade
            "stop_on_failure": opts.score == "all",
        }
        # JSON escapes (\uXXXX) may grow each test's captured output 6 times
        out_cap = min(6 * sum(caps) + (1 << 20), _MAX_SANDBOX_OUTPUT)
        limits = Limits(wall_s=total_s + _STARTUP_S, memory_mb=opts.memory_mb, output_bytes=out_cap)
        try:
            sandbox = self._sandbox(opts.sandbox)
        except SandboxError as exc:
            return _Verdict(grade=Grade.error(f"sandbox: {exc}", sandbox=str(opts.sandbox)))
        body = json.dumps(request).encode()  # ASCII JSON: lone surrogates travel as escapes
        nonce = secrets.token_hex(16)  # the harness reads it after the tests and signs its reply with it
        result = sandbox.run(
            RunRequest(
                ["python3", "-I", "-S", "harness.py"],
                files={"harness.py": HARNESS_SOURCE},
                stdin=b"%d\n%s%s\n" % (len(body), body, nonce.encode()),
                limits=limits,
            )
        )
        if result.stopped_by == "sandbox_error":
            return _Verdict(
                grade=Grade.error(
                    f"sandbox: {result.detail}", sandbox=getattr(opts.sandbox, "name", opts.sandbox)
                )
            )
        if result.stopped_by != "exit" or result.exit_code != 0:
            why = result.detail or result.stderr[-300:].decode("utf-8", "replace")
            return _Verdict(
                grade=Grade.incorrect(
                    f"the submission broke the test run ({result.stopped_by}): {why}",
                    stopped_by=result.stopped_by,
                    exit_code=result.exit_code,
                )
            )
        outcomes = parse_outcomes(result.stdout, len(tests), nonce)
        if outcomes is None:
            return _Verdict(grade=Grade.incorrect("the test harness output was tampered with or cut short"))
        tests_s = sum(
            float(o.get("time_s") or 0.0) for o in outcomes if isinstance(o.get("time_s"), int | float)
        )
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
        self._checks.close()


def _cap(opts: CodeOptions, expected_bytes: int) -> int:
    """A test's output cap: the configured one, or more when the expected output itself is that large."""
    return max(opts.output_cap, 4 * expected_bytes + _CAP_SLACK)


def _call_passed(outcome: dict[str, Any], expected: Any, float_tol: float | None) -> bool:
    """Compared on the encoded value: the submission's sets and dicts are never built (no hash flooding)."""
    if outcome["status"] != "ok":
        return False
    got = outcome.get("value")
    try:
        if encoded_equal(got, expected, float_tol):
            return True
        # APPS call-based outputs wrap the return value in a one-element list.
        return (
            isinstance(expected, list) and len(expected) == 1 and encoded_equal(got, expected[0], float_tol)
        )
    except (ValueError, TypeError, RecursionError):
        outcome["status"] = "malformed"
        return False


def _clean(text: str) -> str:
    """Text from the sandbox made writable anywhere: lone surrogates become ``\\udXXX`` escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _score(
    passed: list[bool], outcomes: list[dict[str, Any]], opts: CodeOptions, timing: dict[str, float] | None
) -> Grade:
    tests = [
        {
            "passed": ok,
            "status": o.get("status"),
            "time_s": round(float(o.get("time_s", 0.0) or 0.0), 4),
            **({"error": _clean(str(o.get("error", ""))[-300:])} if not ok and o.get("error") else {}),
        }
        for ok, o in zip(passed, outcomes, strict=True)
    ]
    n_pass, n = sum(passed), len(passed)
    reason = f"{n_pass}/{n} tests passed"
    details = {"tests": tests, "timing": {k: round(v, 4) for k, v in (timing or {}).items()}}
    if n_pass == n:
        return Grade.correct(reason, **details)
    score = n_pass / n if opts.score == "fraction" else 0.0
    return Grade(score, "incorrect", reason, details)
