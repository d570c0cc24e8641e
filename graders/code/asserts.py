"""Assert-based tests without trusting the submission: the assert programs (trusted dataset code) run on the
trusted side (in a check helper the grader kills at the deadline, ``graders.code.check_worker``), against a
stand-in ``candidate`` whose answers are values the sandboxed function returned, decoded with the
plain-data allow-list. The sandbox sees only call arguments, never the asserts or their expected values.

Two passes per round: *record* runs the programs with asserts made non-fatal and unknown calls answered by a
placeholder, to learn which calls the checks make; the sandbox then runs exactly those calls; *judge* runs
the original programs on the returned values. Calls whose arguments depend on earlier answers show up as new
unknown calls in judge, which starts another round (bounded).

What the submission did never reaches trusted code as its own exception: a failed call raises
``CandidateFailed`` (a BaseException, so no ``except ValueError``/``except Exception`` in a check and no
``StopIteration``-sensitive ``all(map(...))`` can absorb it), and a program that made a failed call fails even
if the check swallowed the exception. A check therefore cannot expect the candidate to raise. Checks run
under a deadline (the grade's time budget) and a cap on calls, so a submission's answers cannot make them run
away. The deadline holds even where the check swallows its exception (`except:`, `except BaseException`,
`contextlib.suppress`, `finally: continue`): CPython unsets a trace function that raised, so the tracer alone
would fire once; the compiled check code also re-checks the deadline at every loop iteration, function or
lambda entry, exception handler and finally block (``_Ticks``). One C call driven by an answer
(``sum(range(candidate(1)))``) sees none of that: the kill of the helper process bounds it.
"""

from __future__ import annotations

import ast
import functools
import inspect
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from graders.code.suites import AST_LOCK, AssertSuite
from graders.code.values import HashSpread, call_key, decode, decode_mutation

MAX_ROUNDS = 64  # each round resolves one more level of dependent calls (``candidate(candidate(x))``)
MAX_CALLS = 5000  # distinct calls one grade may make (all rounds together)
_SEED = 1234
# Checks may use the global ``random`` (HumanEval/38, 50, 53): record and judge must see the same sequence.
_GLOBAL_RANDOM = threading.Lock()
_TRUSTED_FILES = ("<setup>", "<test ")  # filenames of the compiled check code: the frames the tracer watches
_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_TICK = "__rrl_deadline_tick__"  # the name the compiled check code calls (bound per run in its namespace)


class CandidateFailed(BaseException):
    """The sandboxed call did not return a value (raised, crashed, timed out, unsupported or malformed result).
    Carries the submission's exception name as data; trusted code never sees that class itself."""

    def __init__(self, status: str, exc_type: str, message: str) -> None:
        super().__init__(f"candidate {status}" + (f" ({exc_type})" if exc_type else "") + f": {message}")
        self.status, self.exc_type = status, exc_type


class CheckBudgetExceeded(BaseException):
    """The check ran past the grade's deadline, made more than ``MAX_CALLS`` calls, or was cut short by a
    ``StopIteration`` its own code raised on the submission's answer."""


class _Pending:
    """Stand-in answer while recording: absorbs most operations so the check keeps making its calls."""

    def __getattr__(self, name: str) -> _Pending:
        return self

    def __call__(self, *a: Any, **k: Any) -> _Pending:
        return self

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return False  # ``while candidate(x) != goal`` must not spin on a placeholder

    __hash__ = object.__hash__


@dataclass
class CallTable:
    """Known call outcomes by canonical argument key, plus the calls seen but not yet run."""

    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=dict)
    failures: list[BaseException] = field(default_factory=list)  # of the program running now
    spread: HashSpread = field(default_factory=HashSpread)

    def candidate(self, *args: Any, **kwargs: Any) -> Any:
        key = call_key(args, kwargs)
        outcome = self.outcomes.get(key)
        if outcome is None:
            if key not in self.missing and len(self.outcomes) + len(self.missing) >= MAX_CALLS:
                raise CheckBudgetExceeded(f"the check made more than {MAX_CALLS} distinct calls")
            self.missing.setdefault(key, (args, kwargs))
            return _Pending()
        if outcome["status"] == "ok":
            _apply_mutations(args, kwargs, outcome.get("mutated"))
            return decode(outcome["value"])  # a fresh copy per call: checks may mutate what they get
        failure = CandidateFailed(
            str(outcome["status"]), str(outcome.get("exc_type") or ""), str(outcome.get("error", ""))[-300:]
        )
        self.failures.append(failure)
        raise failure

    def add(self, key: str, outcome: dict[str, Any]) -> None:
        """Store one sandbox outcome; a value that does not decode (or floods hashes) makes it a failed call."""
        if outcome.get("status") == "ok":
            try:
                self.spread.add(decode(outcome.get("value")))
                if outcome.get("mutated") is not None:
                    self.spread.add(list(decode_mutation(outcome["mutated"])))
            except (ValueError, TypeError, RecursionError) as exc:
                outcome = {**outcome, "status": "malformed", "error": f"unusable result: {exc}"}
        self.outcomes[key] = outcome


def _apply_mutations(args: tuple[Any, ...], kwargs: dict[str, Any], mutated: Any) -> None:
    """Replay the sandboxed call's in-place changes on the check's own argument objects (``a.sort()``-style
    solutions are checked by looking at the argument afterwards)."""
    if mutated is None:
        return
    new_args, new_kwargs = decode_mutation(mutated)
    for old, new in [
        *zip(args, new_args, strict=False),
        *((kwargs[k], v) for k, v in new_kwargs.items() if k in kwargs),
    ]:
        if type(old) is list and type(new) is list:
            old[:] = new
        elif type(old) in (dict, set) and type(new) is type(old):
            old.clear()
            old.update(new)


class _NonFatalAsserts(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> ast.Try:
        handler = ast.ExceptHandler(type=ast.Name("Exception", ast.Load()), name=None, body=[ast.Pass()])
        return ast.Try(body=[ast.Expr(node.test)], handlers=[handler], orelse=[], finalbody=[])


class _Ticks(ast.NodeTransformer):
    """Insert ``_TICK()`` wherever a check that swallowed the deadline's exception could go on: the start of
    each loop body, function body, lambda, exception handler and finally block, and each comprehension step.
    After the deadline every one of them raises again, so each swallow only unwinds the check further."""

    def visit(self, node: ast.AST) -> Any:
        node = super().visit(node)
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ExceptHandler)):  # fmt: skip
            node.body.insert(0, ast.Expr(_tick_call()))
        elif isinstance(node, (ast.Try, ast.TryStar)) and node.finalbody:
            node.finalbody.insert(0, ast.Expr(_tick_call()))
        elif isinstance(node, ast.Lambda):  # `lambda: body` -> `lambda: (tick(), body)[1]`
            node.body = ast.Subscript(
                ast.Tuple([_tick_call(), node.body], ast.Load()), ast.Constant(1), ast.Load()
            )
        elif isinstance(node, ast.comprehension):  # one more always-true condition: `... if tick() is None`
            node.ifs.append(ast.Compare(_tick_call(), [ast.Is()], [ast.Constant(None)]))
        return node


def _tick_call() -> ast.Call:
    return ast.Call(ast.Name(_TICK, ast.Load()), [], [])


def _compile_check(src: str, filename: str, non_fatal: bool = False) -> Any:
    tree = ast.parse(src, filename)
    if non_fatal:
        tree = _NonFatalAsserts().visit(tree)
    return compile(ast.fix_missing_locations(_Ticks().visit(tree)), filename, "exec")


@dataclass(frozen=True, slots=True)
class _Program:
    record: Any
    judge: Any


@functools.lru_cache(maxsize=1024)
def compile_programs(suite: AssertSuite) -> tuple[Any, tuple[_Program, ...]]:
    """Raises SyntaxError or ValueError (e.g. a lone surrogate) for test code that is not Python."""
    programs = []
    with AST_LOCK:
        for i, src in enumerate(suite.programs):
            if suite.call_check:
                src = f"{src}\n\ncheck({suite.entry_point})\n"
            name = f"<test {i}>"
            programs.append(_Program(_compile_check(src, name, non_fatal=True), _compile_check(src, name)))
        return _compile_check(suite.setup, "<setup>"), tuple(programs)


class _CheckTracer:
    """``sys.settrace`` function for one check run; only the check's own frames are traced. It stops the check
    at ``deadline``, and fails it when a ``StopIteration`` escapes one of its plain functions: a consumer such as
    ``all(map(lambda x: next(iter(candidate(x))) == ..., xs))`` would take that for the end and pass early."""

    def __init__(self, deadline: float, failures: list[BaseException]) -> None:
        self.deadline, self.failures = deadline, failures
        self._raised: dict[int, BaseException] = {}  # frame id -> exception propagating through it

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > self.deadline:
            raise CheckBudgetExceeded("the check ran past the grade's time budget")
        if event == "call":
            return self if frame.f_code.co_filename.startswith(_TRUSTED_FILES) else None
        if event == "exception":
            self._raised[id(frame)] = arg[1]
        elif event == "line":
            self._raised.pop(id(frame), None)  # caught in this frame: it carries on
        elif event == "return":
            raised = self._raised.pop(id(frame), None)
            if (
                isinstance(raised, StopIteration)
                and not frame.f_code.co_flags & _GENERATOR_FLAGS
                and frame.f_code.co_name != "__next__"
            ):
                self.failures.append(
                    CheckBudgetExceeded(
                        f"StopIteration escaped the check's {frame.f_code.co_name} (line {frame.f_lineno}): a map() or "
                        "filter() around it would have ended early"
                    )
                )
        return self


def _execute(
    setup: Any, code: Any, entry_point: str, table: CallTable, deadline: float
) -> BaseException | None:
    def tick() -> None:
        if time.monotonic() > deadline:
            raise CheckBudgetExceeded("the check ran past the grade's time budget")

    namespace: dict[str, Any] = {"__name__": "__check__", _TICK: tick}
    state = random.getstate()
    previous = sys.gettrace()
    table.failures.clear()
    verdict: BaseException | None = None
    try:
        random.seed(_SEED)
        sys.settrace(_CheckTracer(deadline, table.failures))
        exec(setup, namespace)
        namespace[entry_point] = table.candidate
        exec(code, namespace)
    except (Exception, SystemExit, CandidateFailed, CheckBudgetExceeded) as exc:  # noqa: BLE001 - a failing
        verdict = exc  # assert or any error in the check is the test's verdict
    finally:
        sys.settrace(previous)
        random.setstate(state)
    if verdict is None and time.monotonic() > deadline:  # the check swallowed the deadline's exception
        verdict = CheckBudgetExceeded("the check ran past the grade's time budget")
    return table.failures[0] if verdict is None and table.failures else verdict


@dataclass
class AssertRun:
    """Drives the rounds; the grader runs the calls each pass asks for in the sandbox and ``add``s outcomes."""

    suite: AssertSuite
    deadline: float = float("inf")  # time.monotonic() by which every check must have finished
    table: CallTable = field(default_factory=CallTable)

    def record(self) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        setup, programs = compile_programs(self.suite)
        with _GLOBAL_RANDOM:
            for p in programs:
                _execute(setup, p.record, self.suite.entry_point, self.table, self.deadline)
        return self._take_missing()

    def judge(self) -> tuple[list[BaseException | None], list[tuple[tuple[Any, ...], dict[str, Any]]]]:
        """Per program: None (passed) or the exception; plus calls still unknown (another round needed). A
        program that met an unknown call is also replayed with non-fatal asserts, to find all its next calls
        in this round rather than one per round."""
        setup, programs = compile_programs(self.suite)
        verdicts = []
        with _GLOBAL_RANDOM:
            for p in programs:
                known = len(self.table.missing)
                verdicts.append(_execute(setup, p.judge, self.suite.entry_point, self.table, self.deadline))
                if len(self.table.missing) > known:
                    _execute(setup, p.record, self.suite.entry_point, self.table, self.deadline)
        return verdicts, self._take_missing()

    def add(
        self, calls: list[tuple[tuple[Any, ...], dict[str, Any]]], outcomes: list[dict[str, Any]]
    ) -> None:
        for (args, kwargs), outcome in zip(calls, outcomes, strict=True):
            self.table.add(call_key(args, kwargs), outcome)

    def _take_missing(self) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        calls = list(self.table.missing.values())
        self.table.missing.clear()
        return calls
