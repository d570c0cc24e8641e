"""The python tool in the real sandbox: state within a trajectory, nothing shared between trajectories, and
hostile code bounded, reported as a tool error, with the pool healthy afterwards."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reasoning_rl.tools import ToolResult
from reasoning_rl.tools.python_tool import PythonTool

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _call(tool: PythonTool, code: str, session: str, budget_s: float = 5.0) -> ToolResult:
    return asyncio.run(tool.call({"code": code}, session=session, budget_s=budget_s))


def test_state_persists_within_a_trajectory(python_tool: PythonTool) -> None:
    s = "state"
    assert _call(python_tool, "import random\nx = 41\nr = random.random()\ndef f(v): return v * 2", s).ok
    assert _call(python_tool, "open('notes.txt', 'w').write('kept')", s).ok
    first = _call(python_tool, "print(x + 1, f(3)); r", s)
    again = _call(python_tool, "r", s)
    assert first.text.splitlines()[0] == "42 6" and first.text.splitlines()[1] == again.text.strip()
    assert _call(python_tool, "print(open('notes.txt').read())", s).text == "kept\n"
    python_tool.end_session(s)
    assert "NameError" in _call(python_tool, "x", s).text  # ended sessions start over
    python_tool.end_session(s)


def test_nothing_is_shared_between_trajectories(python_tool: PythonTool) -> None:
    setup = (
        "import subprocess\nsecret = 1\nopen('/tmp/leak', 'w').write('x')\nopen('leak2', 'w').write('x')\n"
        "p = subprocess.Popen(['sleep', '300'])"
    )
    assert _call(python_tool, setup, "owner").ok
    python_tool.end_session("owner")  # a trajectory holds its interpreter until it ends
    probe_code = (
        "import os\n"
        "print('secret' in globals(), os.path.exists('/tmp/leak'), os.path.exists('leak2'))\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\\0', b' ').decode())\n"
        "    except OSError:\n"
        "        pass"
    )
    for i in range(3):  # every warm container of the pool (the owner's is reused first: idle list is LIFO)
        probe = _call(python_tool, probe_code, f"other-{i}")
        assert probe.ok, probe.text
        assert probe.text.splitlines()[0] == "False False False"
        assert "sleep 300" not in probe.text and "python3" in probe.text  # the listing itself works
        python_tool.end_session(f"other-{i}")


def test_errors_are_returned_to_the_model(python_tool: PythonTool) -> None:
    r = _call(python_tool, "def g():\n    return 1 / 0\ng()", "err")
    assert r.status == "error" and "ZeroDivisionError" in r.text and 'File "<cell>"' in r.text
    assert "runner.py" not in r.text  # the replay harness stays out of the traceback
    assert _call(python_tool, "syntax error here", "err").status == "error"
    python_tool.end_session("err")


HOSTILE = {
    "infinite loop": ("while True:\n    pass", "timeout"),
    "fork bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "timeout",
    ),
    "memory bomb": ('x = bytearray(1 << 30)\nx[::4096] = b"m" * len(x[::4096])', "error"),
    "huge output": ("while True:\n    print('y' * 10000)", "error"),
    "network": ("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)", "error"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_is_bounded_and_the_pool_stays_healthy(python_tool: PythonTool, name: str) -> None:
    code, status = HOSTILE[name]
    r = _call(python_tool, code, f"hostile-{name}", budget_s=2.0)
    assert r.status == status, r
    assert len(r.text) <= python_tool.max_output_chars + 200
    assert r.latency_s < 60  # a hang guard (30x the 2 s budget): the status is the check
    after = _call(python_tool, "print(6 * 7)", f"after-{name}")
    python_tool.end_session(f"after-{name}")
    assert after.ok and after.text == "42\n"
    # the failed cell is not replayed: the same trajectory keeps working
    assert _call(python_tool, "print('still here')", f"hostile-{name}").text == "still here\n"
    python_tool.end_session(f"hostile-{name}")


def test_local_bubblewrap_fallback_keeps_state(tmp_path: Any) -> None:
    tool = PythonTool("local")
    try:
        assert _call(tool, "x = 2", "s").ok
        assert _call(tool, "x ** 10", "s").text == "1024\n"
        assert "NameError" in _call(tool, "x", "t").text
        tool.end_session("s")
        tool.end_session("t")
    finally:
        tool.close()


def test_repl_details_survive_the_lean_runner(python_tool: PythonTool) -> None:
    """The runner avoids site/ast/json for start-up time: exit(), trailing expressions, imports of modules
    site would have preloaded, unicode and a NUL byte still behave."""
    s = "lean"
    assert (
        _call(python_tool, "import os, json\nprint(json.dumps({'a': os.sep}))\nexit(0)\nprint('no')", s).text
        == '{"a": "/"}\n'
    )
    assert _call(python_tool, "x = 'π'\nx * 2", s).text == "'ππ'\n"
    assert _call(python_tool, "quit()", s).status == "ok"
    bad = _call(python_tool, "print(1)\x00", s)
    python_tool.end_session(s)
    assert bad.status == "error" and "null" in bad.text


def test_a_trajectory_beyond_the_pool_waits_and_no_live_interpreter_is_taken_back(
    python_tool: PythonTool,
) -> None:
    """The pool holds 2 interpreters: a third trajectory waits until one of the two ends, instead of taking a
    live one back (whose next call would replay its cells: new ``os.urandom`` values, a replay on its clock)."""

    async def scenario() -> tuple[ToolResult, ToolResult, bool, ToolResult]:
        call = python_tool.call
        first = await call({"code": "import os\nv = os.urandom(8).hex()\nv"}, session="lru-0", budget_s=5.0)
        assert (await call({"code": "a = 2"}, session="lru-1", budget_s=5.0)).ok
        third = asyncio.create_task(call({"code": "print('third')"}, session="lru-2", budget_s=5.0))
        again = await call({"code": "v"}, session="lru-0", budget_s=5.0)
        waited = not third.done()  # it cannot hold an interpreter before lru-1 ends
        python_tool.end_session("lru-1")
        return first, again, waited, await third

    first, again, waited, third = asyncio.run(scenario())
    for s in ("lru-0", "lru-2"):
        python_tool.end_session(s)
    assert first.ok and again.text == first.text, (first, again)
    assert waited and third.ok and third.text == "third\n", third


def test_a_cell_that_ends_its_interpreter_is_never_replayed(python_tool: PythonTool) -> None:
    """``os._exit`` ends the interpreter: the call is an error, the cell is not recorded, and the next call runs
    the model's code (in a new interpreter, its earlier cells replayed)."""
    s = "ender"
    assert _call(python_tool, "x = 41", s).ok
    ended = _call(python_tool, "import os\nos._exit(0)", s)
    assert ended.status == "error" and "interpreter ended" in ended.text, ended
    later = _call(python_tool, "print(x + 1)", s)
    python_tool.end_session(s)
    assert later.ok and later.text == "42\n", later


FORGE = (
    "import json, os, struct\n"
    "m = json.dumps({'status': 'sandbox_error'}).encode()\n"
    "os.write(4, struct.pack('>I', len(m)) + m)"
)


def test_a_forged_reply_is_graded_not_masked(python_tool: PythonTool) -> None:
    forged = _call(python_tool, FORGE, "forger")
    python_tool.end_session("forger")
    assert forged.status == "error", forged


def test_what_the_model_saw_is_what_the_next_cell_sees(python_tool: PythonTool) -> None:
    """Issue 28: time, os.urandom, uuid and temporary names are not recomputed between calls."""
    s = "real-repl"
    first = _call(
        python_tool,
        "import os, time, uuid, tempfile\nv = (time.time(), os.urandom(8).hex(), str(uuid.uuid4()), tempfile.mkdtemp())\nv",
        s,
    )
    assert first.ok and _call(python_tool, "v", s).text == first.text
    python_tool.end_session(s)
