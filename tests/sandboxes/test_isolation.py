"""Nothing of the trusted side is reachable from inside a sandbox, and nothing a run does reaches the next run
(issue 28): the trainer's environment is unreadable (os.environ, /proc/*/environ, /proc/*/cmdline, inherited
fds); no process the program can see may be ptraced or opened through /proc; a run that lowers its supervisor's
limits, priority or CPU set leaves the next run in that warm sandbox untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandboxes
from sandboxes import Limits, RunRequest, protocol
from sandboxes.types import Sandbox

CANARY = "RRL_TEST_CANARY_7c1e0f"

# Reads everything a program could find the trainer's environment in; prints where it found the canary and
# how much it read (so an empty scan cannot pass).
FIND_CANARY = """
import json, os, sys
canary = sys.argv[1][::-1].encode()  # reversed: our own cmdline must not hold it
found, read = [], {"environ": 0, "cmdline": 0, "fd": 0}
def look(where, data):
    if canary in data:
        found.append(where)
look("os.environ", repr(dict(os.environ)).encode())
pids = [p for p in os.listdir("/proc") if p.isdigit()]
for pid in pids:
    for name in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, name), "rb") as fh:
                look("/proc/%s/%s" % (pid, name), fh.read())
            read[name] += 1
        except OSError:
            pass
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        fds = ["0", "1", "2"]
    for fd in fds:
        path = "/proc/%s/fd/%s" % (pid, fd)
        try:
            look(path + " -> " + os.readlink(path), os.readlink(path).encode())
            f = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        read["fd"] += 1
        try:
            look(path, os.read(f, 1 << 16))
        except OSError:
            pass
        os.close(f)
inherited = []
for fd in range(3, 1024):
    try:
        os.fstat(fd)
        inherited.append(fd)
    except OSError:
        pass
print(json.dumps({"found": found, "read": read, "pids": len(pids), "inherited_fds": inherited}))
"""

# Every way a same-uid program could reach another process of the sandbox: ptrace, its memory, environment and
# file descriptors through /proc. Prints what succeeded.
REACH = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
me, reached, seen = os.getpid(), [], []
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    if pid == me:
        continue
    seen.append(pid)
    if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
        reached.append("ptrace %d" % pid)
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    if libc.ptrace(0x4206, pid, None, None) == 0:  # PTRACE_SEIZE
        reached.append("seize %d" % pid)
        libc.ptrace(17, pid, None, None)
    for name in ("mem", "environ", "fd/0", "fd/1", "fd/2"):
        try:
            os.close(os.open("/proc/%d/%s" % (pid, name), os.O_RDONLY | os.O_NONBLOCK))
            reached.append("/proc/%d/%s" % (pid, name))
        except OSError:
            pass
print(json.dumps({"reached": reached, "seen": seen}))
"""

# What a run inherits: every rlimit, its nice value, scheduler, CPU set, IO priority, OOM score, environment.
STATE = """
import ctypes, json, os, resource
limits = {n: resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_")}
print(json.dumps({
    "limits": limits,
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "scheduler": os.sched_getscheduler(0),
    "cpus": sorted(os.sched_getaffinity(0)),
    "io_priority": ctypes.CDLL(None).syscall({"x86_64": 252, "aarch64": 31}[os.uname().machine], 1, 0),
    "oom_score_adj": open("/proc/self/oom_score_adj").read().strip(),
    "env": dict(os.environ),
}))
"""

# Poisons aimed at every other process the run can see (the supervisor, and on the old local backend the
# namespace's first process): each lowers something a later run would inherit. The run prints how many took.
POISON = """
import ctypes, os, resource
IOPRIO_SET = {"x86_64": 251, "aarch64": 30}[os.uname().machine]
done = 0
for p in [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
    try:
        %s
        done += 1
    except (OSError, AssertionError):
        pass
print(done)
"""
POISONS = {
    "cpu_rlimit": "resource.prlimit(p, resource.RLIMIT_CPU, (1, 1))",
    "stack_and_files": "[resource.prlimit(p, r, (v, v)) for r, v in ((resource.RLIMIT_STACK, 1 << 20), "
    "(resource.RLIMIT_NOFILE, 200), (resource.RLIMIT_FSIZE, 1 << 16))]",
    "nice": "os.setpriority(os.PRIO_PROCESS, p, 19)",
    "one_cpu": "os.sched_setaffinity(p, {min(os.sched_getaffinity(0))})",
    "sched_idle": "os.sched_setscheduler(p, os.SCHED_IDLE, os.sched_param(0))",
    "io_idle": "assert ctypes.CDLL(None).syscall(IOPRIO_SET, 1, p, 3 << 13) == 0, 'refused'",  # class idle
}
# An honest run that needs what the poisons take away: 1.2 s of CPU (the poison leaves 1 s), a 100 kB file.
HONEST = (
    "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2:\n    pass\n"
    "open('out.bin', 'wb').write(b'x' * 100_000)\nprint('honest ok')\n"
)

BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "local"]


def _fresh(backend: str) -> Sandbox:
    """One warm sandbox (a single Docker container), so successive runs share it."""
    return sandboxes.open_sandbox(backend, **({"pool_size": 1} if backend == "docker" else {}))


@pytest.fixture(scope="module", params=BACKENDS)
def warm(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    sb = _fresh(request.param)
    yield sb
    sb.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_trainer_environment_is_unreadable_inside(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary is in the trainer's environment before the sandbox and its processes start; no file, process
    or fd inside shows it (on the old local backend bubblewrap's init kept the trainer's environment, readable
    as /proc/1/environ)."""
    monkeypatch.setenv("RRL_SECRET_TOKEN", CANARY)
    sb = _fresh(backend)
    try:
        for _ in range(2):  # the first run of a fresh sandbox and a warm one
            r = sb.run(RunRequest(["python3", "-c", FIND_CANARY, CANARY[::-1]], limits=Limits(wall_s=20)))
            assert r.ok, r
            report = json.loads(r.stdout)
            assert report["found"] == [] and report["inherited_fds"] == [], report
            assert CANARY.encode() not in r.stdout + r.stderr
            assert report["read"]["cmdline"] >= 2 and report["read"]["environ"] >= 1, report
    finally:
        sb.close()


def test_no_other_process_can_be_traced_or_opened(warm: Sandbox) -> None:
    """The supervisor holds the pipes to the trusted side: no ptrace, no /proc/<pid>/mem, environ or fd of it (or
    of any other process the program sees) may open (the old local backend's bubblewrap init, same uid and
    dumpable, could be ptraced and outlived every run's clean-up)."""
    r = warm.run(RunRequest(["python3", "-c", REACH], limits=Limits(wall_s=20)))
    assert r.ok, r
    report = json.loads(r.stdout)
    assert report["seen"], "the program must see at least its supervisor, or the check proves nothing"
    assert report["reached"] == [], report


@pytest.mark.slow
@pytest.mark.parametrize("poison", sorted(POISONS))
def test_a_poisoning_run_cannot_reach_the_next_run(warm: Sandbox, poison: str) -> None:
    """Poison, then an honest run in the same warm sandbox: the honest one passes and inherits exactly what a
    run inherits in a sandbox nobody poisoned."""
    before = warm.run(RunRequest(["python3", "-c", STATE]))
    assert before.ok, before
    poisoner = warm.run(RunRequest(["python3", "-c", POISON % POISONS[poison]]))
    assert poisoner.ok and int(poisoner.stdout) >= 1, ("the poison must reach the supervisor", poisoner)
    # 1.2 s of CPU time (not wall): the wall limit is a hang guard, wide enough for a niced run on 2 busy cores
    honest = warm.run(RunRequest(["python3", "-c", HONEST], limits=Limits(wall_s=120)))
    assert (honest.stdout, honest.stopped_by, honest.exit_code) == (b"honest ok\n", "exit", 0), honest
    after = warm.run(RunRequest(["python3", "-c", STATE]))
    assert after.ok and json.loads(after.stdout) == json.loads(before.stdout), (before, after)


def test_a_supervisor_that_cannot_be_made_undumpable_runs_nothing(tmp_path: Path) -> None:
    """Dumpable, the supervisor's pipes to the trusted side would be open to the program (ptrace, /proc/<pid>/fd):
    it must refuse the run as a sandbox error, never run it (it used to ignore the failure).
    Runs the supervisor on the host, so its header names only dirs under tmp_path: the supervisor WIPES its
    work and scratch dirs (the real ones are /work and /tmp) and must never see them here."""
    work, scratch, ran = tmp_path / "work", tmp_path / "scratch", tmp_path / "ran"
    work.mkdir()
    scratch.mkdir()
    main = 'if __name__ == "__main__":\n    main()'
    shipped = protocol.supervisor_command()[-1]  # with the fork server it starts
    assert main in shipped
    script = shipped.replace(main, "_undumpable = lambda: False\nmain()")
    payload = protocol.encode(RunRequest(["touch", str(ran)]), kill_all=False)
    line, _, rest = payload.data.partition(b"\n")
    header = {**json.loads(line), "workdir": str(work), "scratch": [str(work), str(scratch)]}
    assert all(Path(d).is_relative_to(tmp_path) for d in [header["workdir"], *header["scratch"]])
    assert header["kill_all"] is False
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script],
        input=json.dumps(header).encode() + b"\n" + rest,
        capture_output=True,
        timeout=30,
    )
    frame = protocol.decode(done.stdout, payload.nonce, 0.0)
    assert frame is not None, done
    assert (frame.result.stopped_by, frame.clean) == ("sandbox_error", False), frame
    assert "undumpable" in frame.result.detail and not ran.exists()
