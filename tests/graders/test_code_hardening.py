"""Red-team classes of issue #15 against the code grader (Docker): a failed call never satisfies a check,
what the response causes is ``incorrect`` (never a masked ``error``), hash floods and lone surrogates cannot
hurt the trusted parent, and correct programs of the once falsely rejected shapes pass."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import graders
from graders.code import CodeGrader
from sandboxes.types import Sandbox
from tests.graders.code_helpers import docker_sandbox, fenced

pytestmark = pytest.mark.docker
FAST = {"timeout_s": 1, "total_timeout_s": 6, "memory_mb": 256}


@pytest.fixture(scope="module")
def sb() -> Iterator[Sandbox]:
    yield from docker_sandbox(pool_size=2)


@pytest.fixture(scope="module")
def grader() -> CodeGrader:
    return CodeGrader()


def check(body: str, entry: str = "f") -> dict[str, str]:
    return {
        "entry_point": entry,
        "test": "def check(candidate):\n" + "".join(f"    {line}\n" for line in body.split("\n")),
    }


# -- 1. the submission's exception never reaches trusted code as its own class ---------------------------------
ABSORBING_CHECKS = {
    "all_map": check("assert all(map(lambda x: candidate(x) == 2 * x, [1, 2, 3]))"),
    "any_not_map": check("assert not any(map(lambda x: candidate(x) != 2 * x, [1, 2, 3]))"),
    "list_map": check("assert list(map(candidate, [1, 2])) == [2, 4] or True\nassert candidate(3) == 6"),
    "except_lookup": check("try:\n    assert candidate(1) == 2\nexcept LookupError:\n    pass"),
    "except_value": check("try:\n    assert candidate(1) == 2\nexcept (ValueError, TypeError):\n    pass"),
    "except_exception": check("try:\n    assert candidate(1) == 2\nexcept Exception:\n    pass"),
    "bare_except": check("try:\n    assert candidate(1) == 2\nexcept:\n    pass"),
    "suppress": check(
        "import contextlib\nwith contextlib.suppress(ArithmeticError, LookupError):\n"
        "    assert candidate(1) == 2"
    ),
    "next_default": check("assert next(iter([candidate(1)]), 2) == 2"),
    "mbpp_style": {
        "test_list": [
            "try:\n    assert f(1) == 2\nexcept (KeyError, IndexError, ValueError, ZeroDivisionError):\n    pass"
        ]
    },
}
RAISERS = {
    "stop_iteration": "def f(x):\n    raise StopIteration",
    "index_error": "def f(x):\n    return [][x]",
    "key_error": "def f(x):\n    return {}[x]",
    "value_error": "def f(x):\n    return int('x')",
    "zero_division": "def f(x):\n    return x / 0",
    "type_error": "def f(x):\n    return x + 'a'",
    "own_class_named_stopiteration": "class StopIteration(Exception):\n    pass\ndef f(x):\n    raise StopIteration",
    "generator_exit": "def f(x):\n    raise GeneratorExit",
    "keyboard_interrupt": "def f(x):\n    raise KeyboardInterrupt",
    "system_exit": "def f(x):\n    raise SystemExit(0)",
    "forged_malformed_value": 'import os\ndef f(x):\n    os.write(3, b\'{"value": {"float": "1.5"}}\\n\')\n    os._exit(0)',
    "unserialisable": "def f(x):\n    return object()",
    "timeout": "def f(x):\n    while True:\n        pass",
}


@pytest.mark.parametrize("check_name", sorted(ABSORBING_CHECKS))
def test_failed_calls_never_satisfy_a_check(grader: CodeGrader, sb: Sandbox, check_name: str) -> None:
    gt = ABSORBING_CHECKS[check_name]
    honest = grader.grade(fenced("def f(x):\n    return 2 * x"), gt, sandbox=sb, **FAST)
    assert honest.verdict == "correct", honest
    for name, code in RAISERS.items():
        g = grader.grade(fenced(code), gt, sandbox=sb, **FAST)
        assert (g.verdict, g.score) == ("incorrect", 0.0), (check_name, name, g)


# -- 2. what the response causes is incorrect; only the infrastructure is error --------------------------------
RESPONSE_FAULTS = {
    "timeout": "import time\ntime.sleep(60)",
    "crash": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
    "output_flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
    "memory": "x = []\nwhile True:\n    x.append(bytearray(32 << 20))",
    "syntax_error": "def f(:",
    "no_code": None,
}


@pytest.mark.parametrize("fault", sorted(RESPONSE_FAULTS))
@pytest.mark.parametrize(
    "gt",
    [
        {"inputs": ["1\n"], "outputs": ["2\n"]},
        {"fn_name": "f", "inputs": [[1]], "outputs": [2]},
        check("assert candidate(1) == 2"),
    ],
    ids=["stdio", "call", "check"],
)
def test_response_faults_are_incorrect(grader: CodeGrader, sb: Sandbox, fault: str, gt: dict) -> None:
    code = RESPONSE_FAULTS[fault]
    response = "I am not sure." if code is None else fenced(code + "\ndef f(x):\n    return 2 * x\nprint(2)")
    g = grader.grade(response, gt, sandbox=sb, **FAST)
    assert (g.verdict, g.score) == ("incorrect", 0.0), (fault, g)


def test_too_many_dependent_calls_is_incorrect(grader: CodeGrader, sb: Sandbox) -> None:
    """``while candidate(x) != 0`` with an answer that never reaches 0: the check never settles."""
    gt = check("x = 1\nwhile candidate(x) != 0:\n    x += 1")
    settles = grader.grade(fenced("def f(x):\n    return 0 if x >= 3 else x"), gt, sandbox=sb, **FAST)
    assert settles.verdict == "correct", settles
    g = grader.grade(fenced("def f(x):\n    return x"), gt, sandbox=sb, timeout_s=1, total_timeout_s=60)
    assert g.verdict == "incorrect" and "new calls" in g.reason, g


def test_a_check_looping_on_the_answer_is_time_boxed(grader: CodeGrader, sb: Sandbox) -> None:
    gt = check("for _ in range(candidate(0)):\n    pass\nassert candidate(0) == 3")
    started = time.monotonic()
    g = grader.grade(fenced("def f(x):\n    return 10 ** 30"), gt, sandbox=sb, timeout_s=1, total_timeout_s=2)
    # the verdict is the check; the wall bound is a hang guard (10**30 iterations never end on their own)
    assert g.verdict == "incorrect" and time.monotonic() - started < 60, g


def test_sandbox_that_cannot_start_is_an_error(grader: CodeGrader, monkeypatch: pytest.MonkeyPatch) -> None:
    import graders.code.grader as module
    from sandboxes import SandboxError

    def refuse(name: str) -> Sandbox:
        raise SandboxError("Docker daemon not reachable")

    monkeypatch.setattr(module, "open_sandbox", refuse)
    g = CodeGrader().grade(fenced("print(2)"), {"inputs": ["1\n"], "outputs": ["2\n"]}, sandbox="docker")
    assert (g.verdict, g.score) == ("error", 0.0) and "not reachable" in g.reason


# -- 4. hash floods: the parent never builds an attacker's colliding set --------------------------------------
FORGE = (
    "import os, json\nM = 2 ** 61 - 1\ndef f(*a):\n    os.write(3, json.dumps({{'value': {value}}}).encode() + b'\\n')\n"
    "    os._exit(0)\n"
)
FLOODS = {
    "set": "{'set': [i * M for i in range(30000)]}",
    "frozenset": "{'frozenset': [i * M for i in range(30000)]}",
    "dict_keys": "{'dict': [[i * M, 0] for i in range(30000)]}",
    "tuples_in_set": "{'set': [{'tuple': [i * M]} for i in range(20000)]}",
    "list_for_check_set": "[i * M for i in range(30000)]",
    "nested_lists": "[[i * M + j for i in range(300)] for j in range(100)]",
}


@pytest.mark.parametrize("flood", sorted(FLOODS))
@pytest.mark.parametrize(
    "gt",
    [
        {"fn_name": "f", "inputs": [[1]], "outputs": [[1, 2]]},
        check("assert len(set(candidate(1))) == 2"),
        check("assert {x for row in candidate(1) for x in row} == {1, 2}"),
    ],
    ids=["call", "check_set", "check_flatten"],
)
def test_hash_flooding_results_are_cheap_and_incorrect(
    grader: CodeGrader, sb: Sandbox, flood: str, gt: dict
) -> None:
    started = time.monotonic()
    g = grader.grade(fenced(FORGE.format(value=FLOODS[flood])), gt, sandbox=sb, **FAST)
    # the old decoder spent 12.4 s on one such set (quadratic) in the trusted process; bounded decoding takes
    # ~0.1 s. Only the trusted side's time is bounded: the sandbox's start-up (seconds when cold, more on a
    # loaded CI machine) is no part of what this checks.
    trusted_s = time.monotonic() - started - g.details["timing"]["sandbox_s"]
    assert g.verdict == "incorrect" and trusted_s < 6, (flood, trusted_s, g)


# -- 5. lone surrogates never escape graders.grade --------------------------------------------------------------
@pytest.mark.parametrize(
    "gt",
    [
        {"inputs": ["1\n"], "outputs": ["1\n"]},
        {"fn_name": "f", "inputs": [["\ud83d"]], "outputs": ["\ud83d"]},
        check("assert candidate('\\ud83d') == '\\ud83d'"),
    ],
    ids=["stdio", "call", "check"],
)
def test_lone_surrogates_in_the_response(sb: Sandbox, gt: dict) -> None:
    for code in (
        "print(input())  # \ud83d",
        "def f(x):\n    return '\ud83d'",
        "s = '\ud83d'\ndef f(x):\n    return x\nprint(1)",
    ):
        g = graders.grade("code", fenced(code) + "\ud800", gt, sandbox=sb, **FAST)
        assert g.verdict in ("correct", "incorrect"), g
        g.to_dict()["reason"].encode("utf-8")  # writable as it is
    honest_code = "def f(x):\n    return x\nif __name__ == '__main__':\n    print(input())"
    honest = graders.grade("code", fenced(honest_code), gt, sandbox=sb, **FAST)
    assert honest.verdict == "correct", honest


def test_lone_surrogates_in_the_ground_truth(sb: Sandbox) -> None:
    g = graders.grade("code", fenced("print(1)"), {"inputs": ["1\n"], "outputs": ["\ud83d\n"]}, sandbox=sb)
    assert g.verdict == "error" and "outputs[0]" in g.reason
    g = graders.grade(
        "code", fenced("def f(x):\n    return x"), {"test_list": ["assert f('\udc00') == 1"]}, sandbox=sb
    )
    assert g.verdict in ("error", "incorrect"), g


# -- 6. correct programs that used to be rejected ---------------------------------------------------------------
CORRECT = {
    "in_place_sort": (check("a = [3, 1, 2]\ncandidate(a)\nassert a == [1, 2, 3]"), "def f(a):\n    a.sort()"),
    "in_place_dict": (
        check("d = {'a': 1}\nassert candidate(d) is None\nassert d == {'a': 1, 'b': 2}"),
        "def f(d):\n    d['b'] = 2",
    ),
    "ten_dependent_calls": (
        check("x = 0\nfor _ in range(10):\n    x = candidate(x)\nassert x == 10"),
        "def f(x):\n    return x + 1",
    ),
    "counter": (
        check(
            "from collections import Counter\nassert candidate('aab') == Counter('aab')\n"
            "assert candidate('aab').most_common(1) == [('a', 2)]"
        ),
        "from collections import Counter\ndef f(s):\n    return Counter(s)",
    ),
    "defaultdict": (
        check("assert candidate('ab') == {'a': [0], 'b': [1]}\nassert candidate('ab')['z'] == []"),
        "from collections import defaultdict\ndef f(s):\n    d = defaultdict(list)\n"
        "    for i, c in enumerate(s):\n        d[c].append(i)\n    return d",
    ),
    "ordereddict": (
        check("from collections import OrderedDict\nassert candidate() == OrderedDict([('b', 1), ('a', 2)])"),
        "from collections import OrderedDict\ndef f():\n    return OrderedDict([('b', 1), ('a', 2)])",
    ),
    "namedtuple": (
        check("p = candidate(1, 2)\nassert p == (1, 2) and p.y == 2"),
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f(a, b):\n    return P(a, b)",
    ),
    "call_counter": (
        {"fn_name": "f", "inputs": [["aab"]], "outputs": [{"a": 2, "b": 1}]},
        "from collections import Counter\ndef f(s):\n    return Counter(s)",
    ),
    "call_namedtuple": (
        {"fn_name": "f", "inputs": [[1, 2]], "outputs": [[1, 2]]},
        "from typing import NamedTuple\nclass P(NamedTuple):\n    x: int\n    y: int\ndef f(a, b):\n    return P(a, b)",
    ),
    "big_stdout": (
        {"inputs": ["3\n"], "outputs": ["7" * (3 << 20) + "\n"]},
        "print('7' * (int(input()) << 20))",
    ),
    "big_call_result": (
        {"fn_name": "f", "inputs": [[300000]], "outputs": [list(range(300000))]},
        "def f(n):\n    return list(range(n))",
    ),
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_programs_pass(grader: CodeGrader, sb: Sandbox, name: str) -> None:
    gt, code = CORRECT[name]
    g = grader.grade(fenced(code), gt, sandbox=sb, timeout_s=4, total_timeout_s=20)
    assert g.verdict == "correct", (name, g)


FENCE = "`" * 3
RESPONSES = {
    "example_usage_after": f"{FENCE}python\ndef f(x):\n    return 2 * x\n{FENCE}\nExample usage:\n{FENCE}python\nprint(f(3))\n{FENCE}\n",
    "closing_fence_on_last_line": f"{FENCE}python\ndef f(x):\n    return 2 * x{FENCE}\n",
    "tilde_fence": "~~~python\ndef f(x):\n    return 2 * x\n~~~\n",
    "indented_in_a_list": f"1. The function:\n   {FENCE}python\n   def f(x):\n       return 2 * x\n   {FENCE}\n",
    "unclosed_at_the_end": f"Here:\n{FENCE}python\ndef f(x):\n    return 2 * x\n",
}


@pytest.mark.parametrize("name", sorted(RESPONSES))
def test_response_shapes_are_extracted(grader: CodeGrader, sb: Sandbox, name: str) -> None:
    for gt in (check("assert candidate(3) == 6"), {"fn_name": "f", "inputs": [[3]], "outputs": [6]}):
        g = grader.grade(RESPONSES[name], gt, sandbox=sb, **FAST)
        assert g.verdict == "correct", (name, g)
