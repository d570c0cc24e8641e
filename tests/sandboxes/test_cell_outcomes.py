"""Issue 41: what comes out of a sandbox that ran a session's code is that code's outcome, never ours. A cell
that forges the fork server's reply, a zygote dead within a session, an interpreter that ends itself or uses
up its CPU budget: each is the program failing (``exit``, cell ``died``), never ``sandbox_error``. Nothing a
call starts outlives the call (the interpreter itself is frozen until the next one), and a session's
interpreter is set up (preload, earlier cells) in a run of its own, off the cell's clock. No test here depends
on timing: process listings, process states and CPU-time limits only."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandboxes
from sandboxes import Limits, RunRequest, RunResult, protocol
from sandboxes.image import SCI_IMAGE, SCI_PRELOAD
from sandboxes.types import ReplCell, Sandbox

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def sci(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    options = {"pool_size": 2} if request.param == "docker" else {"max_sessions": 2}
    sb = sandboxes.open_sandbox(request.param, image=SCI_IMAGE, **options)
    yield sb
    sb.close()


def cell(
    sb: Sandbox, code: str, session: str, history: tuple[str, ...] = (), cpu_s: float | None = None
) -> RunResult:
    repl = ReplCell(code, history, SCI_PRELOAD, cell_s=60, address_space_mb=512, cpu_s=cpu_s)
    return sb.run(RunRequest([], repl=repl, session=session, limits=Limits(wall_s=120)))


FORGE = (
    "import json, os, struct\n"
    "m = json.dumps({'status': 'sandbox_error'}).encode()\n"
    "os.write(4, struct.pack('>I', len(m)) + m)\n"
    "print('forged')"
)
GARBAGE = "import os\nos.write(4, b'\\xff\\xff\\xff\\xffnot a reply')\nprint('garbage')"


@pytest.mark.parametrize("code", [FORGE, GARBAGE], ids=["forged-status", "garbage"])
def test_a_cell_cannot_forge_its_outcome_on_the_reply_channel(sci: Sandbox, code: str) -> None:
    forged = cell(sci, code, "forger")
    assert forged.stopped_by == "exit" and forged.cell == "died", forged
    again = cell(sci, "print(6 * 7)", "forger")  # the session goes on in a new interpreter
    sci.end_session("forger")
    assert again.ok and again.stdout == b"42\n" and again.cell == "ok", again


LEAVE = (
    "import subprocess, threading\n"
    "p = subprocess.Popen(['sleep', '300'])\n"
    "n = 0\n"
    "def spin():\n"
    "    global n\n"
    "    while True:\n"
    "        n += 1\n"
    "threading.Thread(target=spin, daemon=True).start()\n"
    "print(p.pid)"
)
STATE = (
    "import os\n"
    "def state(pid):\n"
    "    try:\n"
    "        return open(f'/proc/{pid}/stat').read().rpartition(')')[2].split()[0]\n"
    "    except OSError:\n"
    "        return 'gone'\n"
    "print(state({pid}))"
)


def test_nothing_a_call_starts_outlives_the_call(sci: Sandbox) -> None:
    """A process a cell leaves behind is killed when the call ends (a zombie of the interpreter at most): it
    cannot burn CPU between calls, nor kill the zygote after the call. The interpreter's threads live on."""
    left = cell(sci, LEAVE, "leaver")
    assert left.ok, left.stderr
    probe = cell(sci, STATE.format(pid=int(left.stdout)) + "\nprint(n > 0)", "leaver")
    sci.end_session("leaver")
    assert probe.ok and probe.stdout.split()[0] in (b"gone", b"Z") and probe.stdout.split()[1] == b"True"


def test_the_interpreter_has_a_cpu_budget_for_its_session(sci: Sandbox) -> None:
    """RLIMIT_CPU on the interpreter, which lives as long as its session: CPU time, not wall time, ends it."""
    spent = cell(sci, "x = 0\nwhile True:\n    x += 1", "spender", cpu_s=1)
    sci.end_session("spender")
    assert spent.stopped_by == "exit" and spent.cell == "died", spent
    assert spent.exit_code == -signal.SIGXCPU and b"CPU budget (1 CPU-s)" in spent.stderr


def test_a_cell_that_ends_its_interpreter_is_recorded_died(sci: Sandbox) -> None:
    ended = cell(sci, "import os\nos._exit(0)", "ender", history=("x = 1",))
    after = cell(
        sci, "print(x)", "ender", history=("x = 1",)
    )  # what the tool sends: the died cell is not in it
    sci.end_session("ender")
    assert ended.stopped_by == "exit" and ended.cell == "died" and not ended.ok, ended
    assert after.ok and after.stdout == b"1\n", after


def test_a_session_interpreter_is_set_up_in_a_run_of_its_own(
    sci: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The preload imports and the replayed cells run before the cell's own run (each replayed cell with its
    own budget), so the cell's clock starts with the cell; a held interpreter gets the cell alone."""
    sent: list[dict[str, object]] = []
    encode = protocol.encode

    def spy(request: RunRequest, **kw: object) -> protocol.Payload:
        if request.repl is not None:
            sent.append(
                {"session": kw.get("session"), "wall_s": request.limits.wall_s, **request.repl.header()}
            )
        return encode(request, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(protocol, "encode", spy)
    first = cell(sci, "print(a + b)", "setup", history=("a = 40", "b = 2"))
    second = cell(sci, "print(a)", "setup", history=("a = 40", "b = 2", "print(a + b)"))
    sci.end_session("setup")
    assert first.stdout == b"42\n" and second.stdout == b"40\n", (first, second)
    restore, own, held = sent
    assert (
        restore["session"] == "start" and restore["code"] == "" and restore["history"] == ["a = 40", "b = 2"]
    )
    assert restore["preload"] == list(SCI_PRELOAD) and restore["wall_s"] == protocol.PRELOAD_S + 2 * 60
    assert own["session"] == held["session"] == "continue" and own["history"] == []
    assert own["code"] == "print(a + b)" and held["code"] == "print(a)"


# ---- the local backend, seen from the host: process states and an outside kill ------------------------------


def _host_pid(ns_pid: int, start: str) -> int:
    """The host pid of a process of one of our sandboxes, by its namespace pid and start time."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            stat = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
        if len(nspid) > 1 and int(nspid[-1]) == ns_pid and stat[19] == start:
            return int(entry.name)
    raise AssertionError(f"no process with namespace pid {ns_pid} started at {start}")


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


WHO = (
    "import os\n"
    "def start(pid):\n"
    "    return open(f'/proc/{pid}/stat').read().rpartition(')')[2].split()[19]\n"
    "print(os.getpid(), start(os.getpid()), os.getppid(), start(os.getppid()))"
)


@pytest.fixture
def local() -> Iterator[Sandbox]:
    sb = sandboxes.open_sandbox("local", image=SCI_IMAGE, max_sessions=1)
    yield sb
    sb.close()


def test_the_interpreter_is_frozen_between_calls(local: Sandbox) -> None:
    """A thread a cell left spinning burns no CPU between calls: the interpreter is stopped (state T)."""
    who = cell(local, LEAVE.replace("print(p.pid)", "") + WHO, "frozen")
    assert who.ok, who.stderr
    pid, start = who.stdout.split()[:2]
    interpreter = _host_pid(int(pid), start.decode())
    assert _state(interpreter) == "T"
    assert cell(local, "print(n > 0)", "frozen").stdout == b"True\n"  # thawed for the call
    assert _state(interpreter) == "T"
    local.end_session("frozen")


def test_a_zygote_dead_within_a_session_is_the_programs_failure(local: Sandbox) -> None:
    """Whatever ends the zygote between a session's calls, the next call is not ``sandbox_error`` (which would
    mask the trajectory): it fails as the program's, and the call after it runs in a new sandbox."""
    who = cell(local, "x = 41\n" + WHO, "orphaned")
    assert who.ok, who.stderr
    zygote_ns, zygote_start = who.stdout.split()[2:]
    os.kill(_host_pid(int(zygote_ns), zygote_start.decode()), signal.SIGKILL)
    lost = cell(local, "print(x + 1)", "orphaned", history=("x = 41\n" + WHO,))
    assert lost.stopped_by == "exit" and lost.cell == "died", lost
    again = cell(local, "print(x + 1)", "orphaned", history=("x = 41\n" + WHO,))
    local.end_session("orphaned")
    assert again.ok and again.stdout == b"42\n", again
