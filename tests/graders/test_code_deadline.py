"""The assert checks' deadline holds whatever the (trusted) check code does with the exception that carries it.

CPython unsets a trace function that raised, so before the deadline ticks a check that swallowed the tracer's
first `CheckBudgetExceeded` ran on without any bound (8 of the 11 cases below hung the trusted parent).
Each case runs in a forked process, so a regression shows as a time-out here, not a hung test session."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from graders.code.asserts import CheckBudgetExceeded
from tests.graders.test_code_trusted import run_check

LOOP = "for _ in range(10**12):\n"
SWALLOWING = {
    "plain loop": LOOP + "    candidate(0)",
    "bare except": LOOP + "    try:\n        candidate(0)\n    except:\n        pass",
    "except BaseException": LOOP + "    try:\n        candidate(0)\n    except BaseException:\n        pass",
    "nested handlers": "while True:\n    try:\n        try:\n            candidate(0)\n        except BaseException:\n"
    "            continue\n    except BaseException:\n        continue",
    "contextlib.suppress": "import contextlib\n"
    + LOOP
    + "    with contextlib.suppress(BaseException):\n        candidate(0)",
    "own __exit__": "class S:\n    def __enter__(self):\n        return self\n    def __exit__(self, *a):\n"
    "        return True\n" + LOOP + "    with S():\n        candidate(0)",
    "finally: continue": LOOP + "    try:\n        candidate(0)\n    finally:\n        continue",
    "recursion": "def f(n):\n    try:\n        candidate(0)\n        f(n + 1)\n    except BaseException:\n"
    "        f(n + 1)\nf(0)",
    "generator": "def g():\n    while True:\n        try:\n            yield candidate(0)\n        except BaseException:\n"
    "            pass\n" + LOOP + "    for _ in g():\n        pass",
    "comprehension": "def safe(x):\n    try:\n        return candidate(x)\n    except BaseException:\n        return 0\n"
    "assert sum(safe(0) for _ in range(10**12)) >= 0",
    "lambda": "import contextlib\nf = lambda: candidate(0)\n"
    + LOOP
    + "    with contextlib.suppress(BaseException):\n        f()",
}


def _verdict(body: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    started = time.monotonic()
    verdict = run_check(body, {"status": "ok", "value": 1}, deadline=time.monotonic() + 0.5)
    queue.put((type(verdict).__name__, time.monotonic() - started))


@pytest.mark.parametrize("body", SWALLOWING.values(), ids=SWALLOWING.keys())
def test_check_that_swallows_the_deadline_still_stops_at_it(body: str) -> None:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    proc = context.Process(target=_verdict, args=(body, queue))
    proc.start()
    proc.join(120)  # a hang guard: without the deadline these checks run for hours
    if proc.is_alive():
        proc.kill()
        proc.join()
        pytest.fail("the check ran on past its 0.5 s deadline (still running after 120 s)")
    name, elapsed = queue.get(timeout=60)
    assert name == CheckBudgetExceeded.__name__, (name, elapsed)


def test_ticks_change_nothing_before_the_deadline() -> None:
    """The instrumented check code still passes and fails as written."""
    body = ("def safe(x):\n    try:\n        return candidate(x)\n    except BaseException:\n        return -1\n"
            "assert [safe(i) for i in range(3)] == [1, 1, 1]\nassert (lambda: candidate(5))() == 1\n"
            "for i in range(3):\n    try:\n        assert candidate(i) == 1\n    finally:\n        pass")  # fmt: skip
    assert run_check(body, {"status": "ok", "value": 1}) is None
    assert isinstance(run_check(body, {"status": "ok", "value": 2}), AssertionError)
