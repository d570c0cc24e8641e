"""Assert-based tests without trusting the submission: the assert programs (trusted dataset code) run HERE,
against a stand-in ``candidate`` whose answers are values the sandboxed function returned, decoded with the
exact-type allow-list. The sandbox sees only call arguments, never the asserts or their expected values.

Two passes per round: *record* runs the programs with asserts made non-fatal and unknown calls answered by a
placeholder, to learn which calls the checks make; the sandbox then runs exactly those calls; *judge* runs
the original programs on the returned values. Calls whose arguments depend on earlier answers show up as new
unknown calls in judge, which starts another round (bounded).
"""

from __future__ import annotations

import ast
import builtins
import functools
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graders.code.suites import AST_LOCK, AssertSuite
from graders.code.values import call_key, decode

MAX_ROUNDS = 3
_SEED = 1234
# Checks may use the global ``random`` (HumanEval/38, 50, 53): record and judge must see the same sequence.
_GLOBAL_RANDOM = threading.Lock()
_EXCEPTIONS = {n: c for n, c in vars(builtins).items() if isinstance(c, type) and issubclass(c, Exception)}


class CandidateFailed(Exception):
    """The sandboxed call did not return a value (crash, timeout, unsupported type)."""


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

    __hash__ = object.__hash__


@dataclass
class CallTable:
    """Known call outcomes by canonical argument key, plus the calls seen but not yet run."""

    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=dict)

    def candidate(self, *args: Any, **kwargs: Any) -> Any:
        key = call_key(args, kwargs)
        outcome = self.outcomes.get(key)
        if outcome is None:
            self.missing.setdefault(key, (args, kwargs))
            return _Pending()
        if outcome["status"] == "ok":
            return decode(outcome["value"])  # a fresh copy per call: checks may mutate what they get
        exc_type = _EXCEPTIONS.get(str(outcome.get("exc_type")))
        message = f"candidate {outcome['status']}: {outcome.get('error', '')[-300:]}"
        raise (exc_type or CandidateFailed)(message)


class _NonFatalAsserts(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> ast.Try:
        handler = ast.ExceptHandler(type=ast.Name("Exception", ast.Load()), name=None, body=[ast.Pass()])
        return ast.Try(body=[ast.Expr(node.test)], handlers=[handler], orelse=[], finalbody=[])


@dataclass(frozen=True, slots=True)
class _Program:
    record: Any
    judge: Any


@functools.lru_cache(maxsize=1024)
def compile_programs(suite: AssertSuite) -> tuple[Any, tuple[_Program, ...]]:
    """Compile the trusted setup and each program twice (record: non-fatal asserts; judge: as written)."""
    programs = []
    with AST_LOCK:
        for i, src in enumerate(suite.programs):
            if suite.call_check:
                src = f"{src}\n\ncheck({suite.entry_point})\n"
            tree = ast.parse(src, f"<test {i}>")
            record = ast.fix_missing_locations(_NonFatalAsserts().visit(ast.parse(src, f"<test {i}>")))
            programs.append(_Program(compile(record, f"<test {i}>", "exec"), compile(tree, f"<test {i}>", "exec")))
        return compile(suite.setup, "<setup>", "exec"), tuple(programs)


def _execute(setup: Any, code: Any, entry_point: str, candidate: Callable[..., Any]) -> BaseException | None:
    namespace: dict[str, Any] = {"__name__": "__check__"}
    state = random.getstate()
    try:
        random.seed(_SEED)
        exec(setup, namespace)
        namespace[entry_point] = candidate
        exec(code, namespace)
    except Exception as exc:  # noqa: BLE001 - a failing assert or any error in the check is the test's verdict
        return exc
    finally:
        random.setstate(state)
    return None


@dataclass
class AssertRun:
    """Drives the rounds; ``run_calls`` executes the given argument tuples in the sandbox and returns outcomes."""

    suite: AssertSuite
    table: CallTable = field(default_factory=CallTable)

    def record(self) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        setup, programs = compile_programs(self.suite)
        with _GLOBAL_RANDOM:
            for p in programs:
                _execute(setup, p.record, self.suite.entry_point, self.table.candidate)
        return self._take_missing()

    def judge(self) -> tuple[list[BaseException | None], list[tuple[tuple[Any, ...], dict[str, Any]]]]:
        """Per program: None (passed) or the exception; plus calls still unknown (another round needed)."""
        setup, programs = compile_programs(self.suite)
        with _GLOBAL_RANDOM:
            verdicts = [_execute(setup, p.judge, self.suite.entry_point, self.table.candidate) for p in programs]
        return verdicts, self._take_missing()

    def add(self, calls: list[tuple[tuple[Any, ...], dict[str, Any]]], outcomes: list[dict[str, Any]]) -> None:
        for (args, kwargs), outcome in zip(calls, outcomes, strict=True):
            self.table.outcomes[call_key(args, kwargs)] = outcome

    def _take_missing(self) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        calls = list(self.table.missing.values())
        self.table.missing.clear()
        return calls
