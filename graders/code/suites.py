"""Normalise a code ground truth into one of three test suites, with errors that name the bad field."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from graders.untrusted_json import UntrustedJSONError, loads_untrusted

# CPython 3.11 keeps the AST converter's recursion depth in shared state: ast.parse from several threads at
# once fails with "AST constructor recursion depth mismatch". Every ast.parse/compile-of-AST here takes this.
AST_LOCK = threading.Lock()


class GroundTruthError(ValueError):
    """The ground truth is malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class StdioSuite:
    """APPS/CodeContests: each test feeds ``inputs[i]`` on stdin and expects ``outputs[i]`` on stdout."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CallSuite:
    """``fn_name(*inputs[i]) == outputs[i]`` (a function, or a method of LeetCode's ``class Solution``)."""

    fn_name: str
    inputs: tuple[tuple[Any, ...], ...]
    outputs: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class AssertSuite:
    """Assert programs run in the trusted parent against the sandboxed function (HumanEval ``check`` / MBPP).

    ``setup`` is trusted code run first (HumanEval prompt helpers, MBPP ``test_setup_code``); each program is
    one test. ``call_check`` programs define ``check`` and are followed by ``check(<entry_point>)``."""

    entry_point: str
    setup: str
    programs: tuple[str, ...]
    call_check: bool


Suite = StdioSuite | CallSuite | AssertSuite


def _text(value: Any, field: str) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)  # APPS sometimes stores one string per line
    if not isinstance(value, str):
        raise GroundTruthError(f"{field} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a program's stdin/stdout are bytes: this text has no byte form
        raise GroundTruthError(f"{field} is not valid Unicode ({exc.reason} at index {exc.start})") from exc
    return value


def _list(gt: dict[str, Any], field: str) -> list[Any]:
    value = gt.get(field)
    if not isinstance(value, list):
        raise GroundTruthError(f"ground truth field {field!r} must be a list, got {type(value).__name__}")
    return value


def parse_suite(ground_truth: Any) -> Suite:
    """Accepts a dict or its JSON text (APPS stores ``input_output`` as a string)."""
    if isinstance(ground_truth, str):
        try:
            ground_truth = loads_untrusted(ground_truth)
        except UntrustedJSONError as exc:
            raise GroundTruthError(f"ground truth {exc}") from None
    if not isinstance(ground_truth, dict):
        raise GroundTruthError(f"ground truth must be an object, got {type(ground_truth).__name__}")
    gt = ground_truth
    if "test" in gt or "test_list" in gt:
        return _assert_suite(gt)
    inputs, outputs = _list(gt, "inputs"), _list(gt, "outputs")
    if len(inputs) != len(outputs):
        raise GroundTruthError(f"inputs has {len(inputs)} tests but outputs has {len(outputs)}")
    if not inputs:
        raise GroundTruthError("ground truth has no tests (inputs is empty)")
    fn_name = gt.get("fn_name")
    if fn_name is None:
        return StdioSuite(
            tuple(_text(v, f"inputs[{i}]") for i, v in enumerate(inputs)),
            tuple(_text(v, f"outputs[{i}]") for i, v in enumerate(outputs)),
        )
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise GroundTruthError(f"fn_name must be a Python identifier, got {fn_name!r}")
    for i, args in enumerate(inputs):
        if not isinstance(args, list):
            raise GroundTruthError(
                f"inputs[{i}] must be the list of call arguments, got {type(args).__name__}"
            )
    return CallSuite(fn_name, tuple(tuple(a) for a in inputs), tuple(outputs))


def _assert_suite(gt: dict[str, Any]) -> AssertSuite:
    entry = gt.get("entry_point") or gt.get("fn_name")
    if "test" in gt:
        if not isinstance(gt["test"], str) or "def check" not in gt["test"]:
            raise GroundTruthError("test must be Python source defining check(candidate)")
        if not isinstance(entry, str) or not entry.isidentifier():
            raise GroundTruthError(f"entry_point must be a Python identifier, got {entry!r}")
        setup = gt.get("prompt", "")
        return AssertSuite(entry, _text(setup, "prompt"), (gt["test"],), call_check=True)
    tests = [_text(t, f"test_list[{i}]") for i, t in enumerate(_list(gt, "test_list"))]
    if not tests:
        raise GroundTruthError("test_list is empty")
    if entry is None:
        entry = _called_name(tests[0])
    if not isinstance(entry, str) or not entry.isidentifier():
        raise GroundTruthError(f"entry_point must be a Python identifier, got {entry!r}")
    setup = _text(gt.get("test_setup_code", ""), "test_setup_code")
    return AssertSuite(entry, setup, tuple(tests), call_check=False)


def _called_name(assertion: str) -> str:
    """MBPP: the function under test is the first name called in the assert (``assert f(1) == 2``)."""
    import ast
    import builtins

    try:
        with AST_LOCK:
            tree = ast.parse(assertion)
    except SyntaxError as exc:
        raise GroundTruthError(f"test_list[0] is not Python: {exc}") from exc
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and not hasattr(builtins, node.func.id)
        ):
            return node.func.id
    raise GroundTruthError("could not find the function under test in test_list[0]; give entry_point")
