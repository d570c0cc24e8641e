"""The trusted axiom audit's warm Lean (graders/lean/_driver.py): started while the response's compile run goes,
out of that run's reach, and replaced by a fresh Lean when the response kills it. The real sandboxes drop every
capability, so these tests attack from inside the local (bubblewrap) sandbox, playing a compromised response
process with a wrapper around the real kernel."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import graders.lean.grader as lean_grader
from graders.lean import LeanGrader
from graders.lean.toolchain import Toolchain, resolve
from sandboxes import Mount
from tests.graders.test_lean_grader import LE_SUCC, NAT, lean  # noqa: F401 - `lean` is a fixture

pytestmark = pytest.mark.lean

HEADER = NAT + "\naxiom cheat : False\n"
CHEAT = {"statement": "theorem zero_eq_one : Eq N.zero (N.succ N.zero)", "header": HEADER}
CHEAT_PROOF = ":= False.rec (motive := fun _ => Eq N.zero (N.succ N.zero)) cheat"
LOG = "/opt/rrl-forge-log/log"

# The compile run's attack on every other process of the driver's command line (the warm audit is a fork of the
# driver; its parent, $PPID, is the driver itself): stop or kill it, feed it a forged audit that ends in an open
# comment (so the real audit text would be swallowed), and read its environment (the audit directory's name).
ATTACK = """#!/bin/sh
case " $* " in *" -o "*)
  for d in /proc/[0-9]*; do
    p=${{d#/proc/}}
    [ "$p" = "$PPID" ] && continue
    tr '\\0' ' ' < $d/cmdline 2>/dev/null | grep -q rrl_lean_driver || continue
    echo "found $p" >> {log}
    kill -{signal} $p && echo "signalled $p" >> {log}
    if printf 'prelude\\n#print "%s"\\n/-' "'zero_eq_one' does not depend on any axioms" > $d/fd/0; then
      echo "wrote $p" >> {log}; else echo "denied $p" >> {log}; fi
    if cat $d/environ > /dev/null; then echo "environ $p" >> {log}; else echo "noenv $p" >> {log}; fi
  done
esac
exec {lean} "$@"
"""


@pytest.fixture
def attacked(
    lean: str,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[str], Path]]:
    """Make the grader's toolchain a compromised `lean` (the real kernel behind the attack script); yields
    ``arm(signal)``, which writes the script with that signal and returns the attack log."""
    real = resolve(lean=lean)
    forge, log = tmp_path / "forge", tmp_path / "log"
    forge.mkdir()
    log.mkdir()
    log.chmod(0o777)  # the sandbox runs as an unprivileged uid
    mounts = (*real.mounts, Mount(str(forge), "/opt/rrl-forge"),
              Mount(str(log), "/opt/rrl-forge-log", read_only=False))  # fmt: skip
    fake = Toolchain("/opt/rrl-forge/lean", real.env, mounts, "test: compromised lean", real.library)
    monkeypatch.setattr(lean_grader, "resolve", lambda *args: fake)

    def arm(signal: str) -> Path:
        wrapper = forge / "lean"
        wrapper.write_text(ATTACK.format(log=LOG, signal=signal, lean=real.lean))
        wrapper.chmod(0o755)
        return log / "log"

    yield arm


def test_known_toolchain_audits_in_the_warm_lean(lean: str) -> None:  # noqa: F811 - the fixture
    """The launcher's libleanshared.so is known, so the audit needs no Lean start of its own (the bench's
    overhead target depends on it) and still catches the header's axiom."""
    assert resolve(lean=lean).library is not None
    grader = LeanGrader()
    try:
        result = grader.grade(CHEAT_PROOF, CHEAT, lean=lean, sandbox="local", timeout_s=20)
    finally:
        grader.close()
    assert (result.verdict, result.details["disallowed"]) == ("incorrect", ["cheat"]), result
    assert result.details["audit_warm"] is True, result


def test_compile_run_cannot_reach_the_warm_audit(attacked: Callable[[str], Path]) -> None:
    """It can stop the warm audit (we continue it) but neither write into its stdin through /proc nor read its
    environment: the verdict is the honest audit's, from the warm Lean."""
    log = attacked("STOP")
    grader = LeanGrader()
    try:
        result = grader.grade(CHEAT_PROOF, CHEAT, sandbox="local", timeout_s=20)
    finally:
        grader.close()
    lines = log.read_text().split()
    assert lines[0::2] == ["found", "signalled", "denied", "noenv"], lines  # exactly one target, untouched
    assert (result.verdict, result.reason) == ("incorrect", "disallowed axioms"), result
    assert result.details["disallowed"] == ["cheat"]
    assert result.details["audit_warm"] is True, result


def test_killed_warm_audit_is_replaced_by_a_fresh_lean(attacked: Callable[[str], Path]) -> None:
    """Killing it gains nothing: the audit then runs in a fresh Lean (honest proofs still pass)."""
    log = attacked("KILL")
    grader = LeanGrader()
    try:
        result = grader.grade(CHEAT_PROOF, CHEAT, sandbox="local", timeout_s=20)
        honest = grader.grade(":= Le.step (Le.refl n)", LE_SUCC, sandbox="local", timeout_s=20)
    finally:
        grader.close()
    assert "signalled" in log.read_text(), log.read_text()
    assert (result.verdict, result.details["disallowed"]) == ("incorrect", ["cheat"]), result
    assert result.details["audit_warm"] is False, result
    assert (honest.verdict, honest.details.get("audit_warm")) == ("correct", False), honest


def test_confined_compile_run_can_start_no_process() -> None:
    """The compile run's seccomp filter (graders/lean/_driver.py `_confine`): no fork, vfork, exec or
    non-thread clone, so no process of the response outlives its Lean to rewrite the `.olean` between Lean's
    write and our read (the race a leftover daemon had before); no signal to another process (stopping the
    driver would turn a failed proof into a sandbox time-out, an `error`); threads still start."""
    import os
    import threading

    from graders.lean import _driver

    if os.uname().machine not in _driver._SECCOMP:
        pytest.skip(f"no seccomp filter for {os.uname().machine}: the compile run is an exec there")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        outcome = []
        try:
            _driver._confine()
            for name, attempt in (("fork", os.fork), ("exec", lambda: os.execv("/bin/true", ["true"])),
                                  ("spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))):  # fmt: skip
                try:
                    child = attempt()
                    outcome.append(f"{name}:started")
                    if child == 0:
                        os._exit(0)
                except PermissionError:
                    outcome.append(f"{name}:denied")
            for name, pid in (
                ("signal-parent", os.getppid()),
                ("signal-group", 0),
                ("signal-self", os.getpid()),
            ):
                try:
                    os.kill(pid, 0)
                    outcome.append(f"{name}:sent")
                except PermissionError:
                    outcome.append(f"{name}:denied")
            thread = threading.Thread(target=outcome.append, args=("thread:ran",))
            thread.start()
            thread.join()
        except BaseException as exc:  # noqa: BLE001 - reported to the test through the pipe
            outcome.append(f"error:{exc!r}")
        os.write(write, " ".join(outcome).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as fh:
        assert fh.read().split() == ["fork:denied", "exec:denied", "spawn:denied", "signal-parent:denied",
                                     "signal-group:denied", "signal-self:sent", "thread:ran"]  # fmt: skip


def test_known_toolchain_compiles_in_the_confined_run(lean: str) -> None:  # noqa: F811 - the fixture
    grader = LeanGrader()
    try:
        result = grader.grade(":= Le.step (Le.refl n)", LE_SUCC, lean=lean, sandbox="local", timeout_s=20)
    finally:
        grader.close()
    assert (result.verdict, result.details["confined"]) == ("correct", True), result


def test_concurrent_grades_never_see_each_others_olean(lean: str) -> None:  # noqa: F811 - the fixture
    """Eight grades at once on one grader, a correct proof, a wrong one and one through the header's axiom in
    turn: each verdict is its own proof's (every run compiles and audits in its own work dir and a fresh,
    randomly named audit dir, so no grade can read another's `.olean`)."""
    from concurrent.futures import ThreadPoolExecutor

    cases = [(":= Le.step (Le.refl n)", LE_SUCC, ("correct", "")),
             (":= Le.refl n", LE_SUCC, ("incorrect", "lean error")),
             (CHEAT_PROOF, CHEAT, ("incorrect", "disallowed axioms"))] * 3  # fmt: skip
    grader = LeanGrader()
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda c: grader.grade(c[0], c[1], lean=lean, sandbox="local", timeout_s=60),
                                    cases))  # fmt: skip
    finally:
        grader.close()
    assert [(r.verdict, r.reason) for r in results] == [expected for _, _, expected in cases], results
