"""Code-grader pieces that need no Docker: extraction, output comparison, the result codec, ground-truth
parsing, options, the assert replay, and a few grades through the local (bubblewrap) sandbox."""

from __future__ import annotations

import math

import pytest

import graders
from graders.code import CodeGrader, GroundTruthError, extract_code, parse_suite
from graders.code.asserts import AssertRun
from graders.code.compare import output_matches
from graders.code.suites import AssertSuite, CallSuite, StdioSuite
from graders.code.values import Unserialisable, decode, encode, values_equal
from tests.graders.code_helpers import fenced


def test_extracts_last_python_block_by_default() -> None:
    text = "```python\nfirst\n```\nthen\n```\nsecond\n```\nout:\n```text\n42\n```\n"
    assert extract_code(text) == "second\n"
    assert extract_code(text, "first_block") == "first\n"
    assert extract_code("no code here") is None
    assert extract_code("raw code", "raw") == "raw code"
    with pytest.raises(ValueError, match="extract must be one of"):
        extract_code(text, "middle")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("got", "expected", "kw", "ok"),
    [
        ("1 2\r\n3  \n\n", "1 2\n3\n", {}, True),
        ("1 2 3\n", "1 2\n3\n", {}, False),
        ("YES\n", "yes\n", {}, False),
        ("YES\n", "yes\n", {"case": "insensitive"}, True),
        ("0.3333333\n", "0.333333333\n", {"float_tol": 1e-6}, True),
        ("0.3333333\n", "0.333333333\n", {}, False),
        ("0.34\n", "0.333333333\n", {"float_tol": 1e-6}, False),
    ],
)
def test_output_comparison(got: str, expected: str, kw: dict, ok: bool) -> None:
    assert output_matches(got, expected, **kw) is ok


def test_codec_round_trips_allowed_types() -> None:
    value = [
        1,
        2.5,
        "s",
        None,
        True,
        (1, (2,)),
        {"a": {3, 4}},
        frozenset({1}),
        b"\x00",
        1 + 2j,
        float("inf"),
        10**40,
    ]
    assert decode(encode(value)) == value
    assert math.isnan(decode(encode(float("nan"))))


@pytest.mark.parametrize(
    "bad", [object(), [type("E", (), {})()], type("E", (), {"__eq__": lambda s, o: True})()]
)
def test_codec_refuses_arbitrary_objects(bad: object) -> None:
    with pytest.raises(Unserialisable):
        encode(bad)


def _always_equal(base: type) -> type:
    return type(
        "Evil",
        (base,),
        {
            "__eq__": lambda s, o: True,
            "__hash__": base.__hash__,
            "__iter__": lambda s: iter([0]),
            "__str__": lambda s: "0",
        },
    )


@pytest.mark.parametrize(
    ("value", "content"),
    [
        (_always_equal(int)(1), 1),
        (_always_equal(str)("x"), "x"),
        (_always_equal(list)([1, 2]), [1, 2]),
        (_always_equal(float)(2.5), 2.5),
        (_always_equal(tuple)((1, 2)), (1, 2)),
        (_always_equal(dict)({"a": 1}), {"a": 1}),
        (_always_equal(set)({3}), {3}),
        (_always_equal(frozenset)({4}), frozenset({4})),
    ],
)
def test_subclasses_are_encoded_by_their_stored_content(value: object, content: object) -> None:
    """Old policy refused every subclass; now the content is read through the base type, so an overridden
    ``__eq__``/``__iter__``/``__str__`` has no say and the decoded value is plain data."""
    decoded = decode(encode(value))
    assert decoded == content and type(decoded) is type(content)


@pytest.mark.parametrize(
    "malformed", [{"evil": 1}, {"tuple": 1, "x": 2}, {"float": "1.5"}, {"dict": [[1]]}, {"set": "x"}]
)
def test_decoder_is_strict(malformed: object) -> None:
    with pytest.raises(ValueError):
        decode(malformed)


def test_values_equal_is_type_strict_for_bools_and_tolerant_for_floats() -> None:
    assert values_equal((1, 2), [1, 2], None)
    assert not values_equal(True, 1, None)
    assert values_equal(0.1 + 0.2, 0.3, 1e-9) and not values_equal(0.1 + 0.2, 0.3, None)
    assert not values_equal("3", 3, None)


def test_parse_suite_formats_and_errors() -> None:
    assert isinstance(parse_suite('{"inputs": ["1"], "outputs": ["1"]}'), StdioSuite)
    assert isinstance(parse_suite({"fn_name": "f", "inputs": [[1]], "outputs": [1]}), CallSuite)
    mbpp = parse_suite({"test_list": ["assert math.isclose(area(2), 4.0)"], "test_setup_code": "import math"})
    assert isinstance(mbpp, AssertSuite) and mbpp.entry_point == "area"
    for bad, field in [
        ({"inputs": ["1"]}, "outputs"),
        ({"inputs": ["1", "2"], "outputs": ["1"]}, "inputs has 2"),
        ({"fn_name": "not valid", "inputs": [[1]], "outputs": [1]}, "fn_name"),
        ({"fn_name": "f", "inputs": [1], "outputs": [1]}, r"inputs\[0\]"),
        ("{", "ground truth is not valid JSON"),
        ({"test": "def check(c): pass", "entry_point": None}, "entry_point"),
    ]:
        with pytest.raises(GroundTruthError, match=field):
            parse_suite(bad)


def test_bad_ground_truth_is_an_error_grade_and_bad_options_raise() -> None:
    grader = CodeGrader()
    g = grader.grade(fenced("print(1)"), {"inputs": [], "outputs": []}, sandbox="local")
    assert g.verdict == "error" and "no tests" in g.reason
    with pytest.raises(ValueError, match="unknown code-grader option"):
        grader.grade(fenced("print(1)"), {"inputs": ["1"], "outputs": ["1"]}, timeout=3)


def test_assert_replay_never_runs_the_submission_and_sees_only_inputs() -> None:
    suite = AssertSuite(
        "f",
        "",
        ("def check(candidate):\n    x = candidate(2)\n    assert candidate(x) == 16\n",),
        call_check=True,
    )
    run = AssertRun(suite)
    first = run.record()
    assert first == [((2,), {})]  # the second call's argument depends on the first answer
    run.add(first, [{"status": "ok", "value": 4}])
    verdicts, more = run.judge()
    assert more == [((4,), {})]
    run.add(more, [{"status": "ok", "value": 16}])
    verdicts, more = run.judge()
    assert verdicts == [None] and more == []


def test_registered_as_code() -> None:
    assert isinstance(graders.get("code"), CodeGrader)


@pytest.mark.parametrize(
    ("gt", "good", "bad"),
    [
        (
            {"inputs": ["2 3\n"], "outputs": ["5\n"]},
            "a, b = map(int, input().split())\nprint(a + b)",
            "print(6)",
        ),
        (
            {"fn_name": "f", "inputs": [[2]], "outputs": [[2, 2]]},
            "def f(n):\n    return [n] * n",
            "def f(n):\n    return (n,) * n + (1,)",
        ),
        (
            {"test_list": ["assert f(2) == 4"]},
            "def f(n):\n    return n * n",
            "def f(n):\n    return n + n + 1",
        ),
    ],
)
def test_local_sandbox_grades(gt: dict, good: str, bad: str) -> None:
    grader = CodeGrader()
    assert grader.grade(fenced(good), gt, sandbox="local").verdict == "correct"
    assert grader.grade(fenced(bad), gt, sandbox="local").verdict == "incorrect"
    grader.close()


class _BrokenSandbox:
    """A backend whose infrastructure fails: the grade must be ``error`` (masked), never a 0."""

    name = "broken"
    isolation = "strong"

    def run(self, request: object) -> object:
        from sandboxes import RunResult

        return RunResult(b"", b"", None, 0.0, "sandbox_error", "daemon went away")

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "gt",
    [
        {"inputs": ["1\n"], "outputs": ["1\n"]},
        {"fn_name": "f", "inputs": [[1]], "outputs": [1]},
        {"test_list": ["assert f(1) == 1"]},
    ],
)
def test_sandbox_failure_is_an_error_grade(gt: dict) -> None:
    g = CodeGrader().grade(fenced("def f(x):\n    return x\nprint(1)"), gt, sandbox=_BrokenSandbox())
    assert (g.verdict, g.score) == ("error", 0.0) and "daemon went away" in g.reason
