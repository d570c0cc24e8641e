"""A result the submission forges can never make the code grade ``error`` (issue 28).

The submission shares its test's process with the harness's reporting code, so it can always write a result
line of its own; whatever that line (or a whole harness reply) holds, trusted code must judge it, not raise:
a malformed outcome is that test's failure (``incorrect``). The harness's reply as a whole is signed with a
per-run nonce that no test process can read.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graders.code import CodeGrader
from graders.code.outcomes import checked
from sandboxes import RunRequest, RunResult
from tests.graders.code_helpers import fenced

CALL_GTS = [
    {"fn_name": "f", "inputs": [[1]], "outputs": [{"a": 1}]},
    {"fn_name": "f", "inputs": [[1]], "outputs": [[1, 2]]},
    {"entry_point": "f", "test": "def check(candidate):\n    assert candidate(1) == {'a': 1}\n"},
]
GRADER = CodeGrader()  # one for the module: its check helpers stay warm
FORGED_LINES = [
    {"value": {"defaultdict": ""}},
    {"value": {"defaultdict": []}},
    {"value": {"namedtuple": "x"}},
    {"value": {"tuple": {"a": 1}}},
    {"value": {"a": 1}, "mutated": 5},
    {"value": {"dict": [["a", 1]]}, "mutated": [[{"defaultdict": ""}], {"dict": []}]},
    {"value": {"dict": [["a", 1]]}, "mutated": [[], []]},
    {"error": ["not", "text"], "message": {"x": 1}},
    ["value"],
    "value",
]


@pytest.mark.parametrize("line", FORGED_LINES, ids=[json.dumps(x)[:40] for x in FORGED_LINES])
@pytest.mark.parametrize("gt", CALL_GTS, ids=["call_dict", "call_list", "check"])
def test_a_result_line_forged_by_the_submission_is_incorrect(gt: dict[str, Any], line: Any) -> None:
    code = f"import os\ndef f(x):\n    os.write(3, {json.dumps(line).encode()!r} + b'\\n')\n    os._exit(0)"
    g = GRADER.grade(fenced(code), gt, sandbox="local", timeout_s=2, total_timeout_s=6)
    assert (g.verdict, g.score) == ("incorrect", 0.0), g


class _ReplySandbox:
    """A sandbox whose harness replies ``results`` (as if the harness itself were subverted), signed with the
    run's nonce unless ``sign`` is off."""

    name = "reply"
    isolation = "strong"

    def __init__(self, results: list[Any], sign: bool = True) -> None:
        self.results, self.sign = results, sign

    def run(self, request: RunRequest) -> RunResult:
        nonce = request.stdin.rstrip(b"\n")[-32:].decode() if self.sign else "0" * 32  # the stdin's tail
        return RunResult(json.dumps({"nonce": nonce, "results": self.results}).encode(), b"", 0, 0.01, "exit")

    def close(self) -> None:
        pass


_TAGS = ["tuple", "dict", "set", "frozenset", "bytes", "complex", "float", "odict", "counter", "defaultdict"]
_JSON = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4), st.sampled_from(_TAGS)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from([*_TAGS, "value", "mutated", "status", "time_s", "error"]), inner, max_size=3
        ),
    ),
    max_leaves=10,
)
_OUTCOME = st.one_of(
    _JSON,
    st.fixed_dictionaries(
        {"status": st.sampled_from(["ok", "error", "crash", "weird"]), "value": _JSON},
        optional={"mutated": _JSON, "time_s": _JSON, "error": _JSON, "exc_type": _JSON, "stdout": _JSON},
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(outcome=_OUTCOME, gt=st.sampled_from([*CALL_GTS, {"inputs": ["1\n"], "outputs": ["2\n"]}]))
def test_no_harness_reply_makes_the_grade_an_error(outcome: Any, gt: dict[str, Any]) -> None:
    g = GRADER.grade(fenced("def f(x):\n    return x\nprint(2)"), gt, sandbox=_ReplySandbox([outcome]))
    assert g.verdict in ("correct", "incorrect"), (outcome, g)


def test_a_reply_without_the_runs_nonce_is_not_the_harnesss() -> None:
    passing = [{"status": "ok", "stdout": "2\n", "time_s": 0.01}]
    gt = {"inputs": ["1\n"], "outputs": ["2\n"]}
    signed = GRADER.grade(fenced("print(2)"), gt, sandbox=_ReplySandbox(passing))
    assert signed.verdict == "correct", signed
    forged = GRADER.grade(fenced("print(2)"), gt, sandbox=_ReplySandbox(passing, sign=False))
    assert forged.verdict == "incorrect" and "tampered" in forged.reason, forged


FIND_NONCE = """import gc, os, re, sys
pat = re.compile(r"[0-9a-f]{32}")
seen = set()
for obj in gc.get_objects():
    for s in ([obj] if isinstance(obj, (str, bytes)) else []):
        s = s.decode("latin-1") if isinstance(s, bytes) else s
        seen.update(pat.findall(s))
frame = sys._getframe()
while frame is not None:
    for v in list(frame.f_locals.values()) + list(frame.f_globals.values()):
        if isinstance(v, (str, bytes)):
            seen.update(pat.findall(v.decode("latin-1") if isinstance(v, bytes) else v))
    frame = frame.f_back
try:
    seen.update(pat.findall(os.read(0, 1 << 16).decode("latin-1")))
except OSError:
    pass
for pid in os.listdir("/proc"):
    try:
        fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
        seen.update(pat.findall(os.read(fd, 1 << 16).decode("latin-1")))
    except OSError:
        pass
print(sorted(seen)[0] if len(seen) == 1 else " ".join(sorted(seen)))
"""


def test_no_test_process_can_read_the_nonce(monkeypatch: pytest.MonkeyPatch) -> None:
    """The nonce waits in the harness's stdin pipe until the tests are over: a submission that searches its
    memory, its stdin and every process's stdin for it does not find it."""
    import graders.code.grader as module

    nonce = "5a" * 16
    monkeypatch.setattr(module.secrets, "token_hex", lambda n: nonce)
    gt = {"inputs": ["1\n"], "outputs": [nonce + "\n"]}
    g = GRADER.grade(fenced(FIND_NONCE), gt, sandbox="local", timeout_s=4, total_timeout_s=8)
    assert g.verdict == "incorrect", g
    assert g.details["tests"][0]["status"] == "ok", g  # it ran to the end, and printed no nonce


def test_an_outcome_is_checked_whole() -> None:
    assert checked({"status": "ok", "value": {"dict": [["a", 1]]}, "time_s": 0.1})["status"] == "ok"
    for bad in [
        {"status": "ok", "value": {"defaultdict": ""}},
        {"status": "ok", "value": 1, "mutated": [[], []]},
        {"status": "ok", "value": 1, "extra": 1},
        {"status": "passed"},
        {"status": "ok", "time_s": "1"},
        {"status": "ok", "exit_code": True},
        ["ok"],
    ]:
        assert checked(bad)["status"] == "malformed", bad
