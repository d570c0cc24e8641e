"""The local (bubblewrap) backend enforces the pids and the aggregate memory limit (a cgroup leaf per warm namespace),
refuses to run as root without them, and ``auto`` falling back to it is loud."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import sandboxes
from sandboxes import Limits, RunRequest, SandboxError
from sandboxes.cgroup import Cgroups
from sandboxes.types import Sandbox

# Children stay alive until the parent has forked all it can (they wait for the pipe's EOF, not a delay), so the
# count is what the pids limit allows at once however slowly a loaded machine forks.
FORKS = """
import os
r, w = os.pipe()
n = 0
for _ in range(200):
    try:
        if os.fork() == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        n += 1
    except OSError:
        break
print(n, flush=True)
os._exit(0)
"""
# Six children of 200 MB each (1.2 GB together), every one far below the per-process RLIMIT_AS of 512 MB. Each
# holds its memory until every child holds its own or is dead (not for a fixed second): the count is what the
# aggregate limit allows at once however slowly a loaded machine runs them.
MEMORY = """
import os, select
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
kids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        x = bytearray(200 << 20)
        for i in range(0, len(x), 4096):
            x[i] = 1
        os.write(ready_w, b"%08d" % os.getpid())
        os.read(go_r, 1)
        os._exit(0)
    kids.append(pid)
os.close(ready_w)
ready, status = set(), {}
while len(ready | set(status)) < len(kids):
    pid, code = os.waitpid(-1, os.WNOHANG)
    if pid:
        status[pid] = code
    elif select.select([ready_r], [], [], 0.05)[0] and (data := os.read(ready_r, 8)):  # one pid per write
        ready.add(int(data))
os.close(go_w)
for k in kids:
    if k not in status:
        status[k] = os.waitpid(k, 0)[1]
print(sum(code == 0 for code in status.values()), flush=True)
"""

needs_cgroups = pytest.mark.skipif(Cgroups.find() is None, reason="no writable cgroup on this machine")


@needs_cgroups
def test_pids_limit_is_enforced(local_sandbox: Sandbox) -> None:
    r = local_sandbox.run(RunRequest(["python3", "-c", FORKS], limits=Limits(pids=64, wall_s=20)))
    assert r.stopped_by == "exit" and 0 < int(r.stdout) < 64, r


@needs_cgroups
def test_aggregate_memory_limit_is_enforced(local_sandbox: Sandbox) -> None:
    r = local_sandbox.run(RunRequest(["python3", "-c", MEMORY], limits=Limits(memory_mb=512, wall_s=40)))
    assert r.stopped_by == "exit" and int(r.stdout) <= 2, r


@needs_cgroups
def test_one_process_over_the_cgroup_limit_is_a_memory_stop(local_sandbox: Sandbox) -> None:
    code = "x = bytearray(100 << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\nprint('ok')"
    r = local_sandbox.run(RunRequest(["python3", "-c", code], limits=Limits(memory_mb=64, wall_s=20)))
    assert r.stopped_by == "memory" and b"ok" not in r.stdout, r


@needs_cgroups
def test_leftovers_die_after_each_run_and_no_leaf_outlives_close() -> None:
    """The warm box's leaf holds only bubblewrap and the supervisor between runs; close removes the leaf."""
    before = set(_own_leaves())  # other sandboxes of this process (the session fixture's) keep theirs
    sb = sandboxes.open_sandbox("local")
    try:
        r = sb.run(RunRequest(["python3", "-c", "import subprocess\nsubprocess.Popen(['sleep', '60'])"]))
        assert r.stopped_by == "exit", r
        leaves = set(_own_leaves()) - before
        assert len(leaves) == 1, leaves
        comms = [
            Path(f"/proc/{pid}/comm").read_text().strip()
            for leaf in leaves
            for pid in (leaf / "cgroup.procs").read_text().split()
        ]
        assert "sleep" not in comms and set(comms) <= {"bwrap", "python3"}, comms
    finally:
        sb.close()
    assert not set(_own_leaves()) - before


def _own_leaves() -> list[Path]:
    cgroups = Cgroups.find()
    assert cgroups is not None
    return [d for b in cgroups.bases[:1] for d in b.glob(f"rrl-sandbox-{os.getpid()}-*")]


NAMESPACE = "import os\nprint(os.readlink('/proc/self/ns/pid'), os.readlink('/proc/self/ns/ipc'))"


def test_warm_namespace_is_reused_and_replaced_when_its_supervisor_dies() -> None:
    """Runs share one warm namespace (no bubblewrap start per run); a program that kills its supervisor
    scores as the program's failure and the next run gets a working fresh namespace."""
    sb = sandboxes.open_sandbox("local")
    try:
        first, second = (sb.run(RunRequest(["python3", "-c", NAMESPACE])) for _ in range(2))
        assert first.stopped_by == "exit" and first.stdout == second.stdout, (first, second)
        # the supervisor is the namespace's PID 1, so signals from inside cannot kill it; starving it of
        # file descriptors still makes it die before it reports
        starve = "import os, resource\nresource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (3, 3))"
        killer = sb.run(RunRequest(["python3", "-c", starve]))
        assert (killer.stopped_by, killer.exit_code) == ("exit", None), killer
        assert "killed the sandbox supervisor" in killer.detail, killer
        after = sb.run(RunRequest(["python3", "-c", "print('fresh')"]))
        assert (after.stdout, after.stopped_by) == (b"fresh\n", "exit"), after
    finally:
        sb.close()


def test_root_without_cgroups_is_refused_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandboxes import local_backend

    monkeypatch.setattr(local_backend.Cgroups, "find", classmethod(lambda cls: None))
    monkeypatch.setattr(local_backend.os, "geteuid", lambda: 0)
    with pytest.raises(SandboxError, match="cannot bound processes or total memory as root"):
        sandboxes.open_sandbox("local")
    assert sandboxes.open_sandbox("local", unbounded=True).limits_note.startswith("rlimits only")


def test_auto_fallback_is_loud(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from sandboxes import docker_backend

    def no_docker(*args: object, **kwargs: object) -> None:
        raise SandboxError("Docker daemon not reachable (test)")

    monkeypatch.setattr(docker_backend, "DockerSandbox", no_docker)
    monkeypatch.setattr(sandboxes, "_fallback_warned", False)
    with caplog.at_level(logging.INFO, logger="sandboxes"):
        first, second = sandboxes.open_sandbox("auto"), sandboxes.open_sandbox("auto")
    assert first.name == second.name == "local"
    levels = [r.levelno for r in caplog.records if "WEAKER isolation" in r.getMessage()]
    assert levels == [logging.WARNING, logging.INFO]  # once loud, then quiet
    ok, message = sandboxes.check("auto")
    assert ok and "WARNING: `auto` falls back" in message and "not reachable (test)" in message


def test_threads_get_their_own_warm_namespaces() -> None:
    """bubblewrap dies with the thread that started it (--die-with-parent), so a warm namespace serves only its
    own thread: runs from short-lived threads (a fresh executor per batch) and the main thread all succeed."""
    sb = sandboxes.open_sandbox("local")
    try:
        for _ in range(2):
            with ThreadPoolExecutor(3) as ex:
                results = list(
                    ex.map(lambda i: sb.run(RunRequest(["python3", "-c", f"print({i})"])), range(9))
                )
            assert [(r.stdout, r.stopped_by) for r in results] == [
                (f"{i}\n".encode(), "exit") for i in range(9)
            ]
        main = sb.run(RunRequest(["python3", "-c", "print('main')"]))
        assert (main.stdout, main.stopped_by) == (b"main\n", "exit"), main
    finally:
        sb.close()


LEAVE = """
import os
for path in ("/left", "/dev/left", "/dev/shm/left", "/dev/mqueue/left", "/tmp/left", "/work/left"):
    try:
        open(path, "w").write("x")
    except OSError:
        pass
print("done")
"""
LOOK_LEFT = "import os\nprint([p for p in os.listdir('/') + ['/dev/' + n for n in os.listdir('/dev')] if 'left' in p])"


def test_no_file_anywhere_survives_in_the_warm_namespace() -> None:
    """The namespace outlives the run, so no path the program can write may keep a file for the next run:
    bubblewrap's root and /dev are read-only, the scratch dirs are wiped (on the old per-run code, a fresh root
    each run; with a warm root left writable, /left and /dev/left survived)."""
    sb = sandboxes.open_sandbox("local")
    try:
        assert sb.run(RunRequest(["python3", "-c", LEAVE])).stdout == b"done\n"
        after = sb.run(
            RunRequest(["python3", "-c", LOOK_LEFT + "\nprint(os.listdir('/dev/shm'), os.listdir('.'))"])
        )
        assert after.stdout == b"[]\n[] []\n", after
    finally:
        sb.close()


ADD_KEYS = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print([libc.syscall(248, b"user", b"rrl-key", b"secret", 6, ring) > 0 for ring in (-4, -5)])
"""
FIND_KEYS = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print([libc.syscall(250, 10, ring, b"user", b"rrl-key", 0) for ring in (-4, -5)])
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers of x86_64")
def test_keys_do_not_survive_in_the_warm_namespace() -> None:
    """User and user-session keyrings belong to the (warm) user namespace: a key one run adds must be gone in
    the next (it was found there before the supervisor cleared the keyrings)."""
    sb = sandboxes.open_sandbox("local")
    try:
        assert sb.run(RunRequest(["python3", "-c", ADD_KEYS])).stdout == b"[True, True]\n"
        found = sb.run(RunRequest(["python3", "-c", FIND_KEYS]))
        assert found.stdout == b"[-1, -1]\n", found
    finally:
        sb.close()


def test_a_forked_child_starts_its_own_warm_namespace() -> None:
    """A process forked after the sandbox was used must not talk to its parent's warm supervisor (the pipes
    are shared): parent and child running at the same time each get their own answer."""
    sb = sandboxes.open_sandbox("local")

    def say(name: str) -> bytes:
        return sb.run(RunRequest(["python3", "-c", f"import time\ntime.sleep(0.3)\nprint('{name}')"])).stdout

    try:
        assert say("warm") == b"warm\n"
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, say("child"))
            os._exit(0)
        os.close(write)
        parent = say("parent")
        os.waitpid(pid, 0)
        assert (parent, os.read(read, 100)) == (b"parent\n", b"child\n")
    finally:
        sb.close()
