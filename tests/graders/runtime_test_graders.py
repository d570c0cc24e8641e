"""Graders with deliberate faults, loaded by worker processes through "module:attr" grader specs.

Tests build the spec from ``__name__`` so it works however pytest put this directory on sys.path.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import subprocess
import sys
import time
from typing import Any

from graders.types import Grade


class EchoGrader:
    """Correct iff the response equals the ground truth; ``sleep_s`` / ``hang`` / ``boom`` options inject faults;
    ``gate`` + ``gate_from``: a response (an integer) >= ``gate_from`` waits until the file ``gate`` exists."""

    name = "echo"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        if options.get("hang"):
            while True:  # never returns, like a SymPy blow-up
                time.sleep(0.05)
        if options.get("boom"):
            raise ValueError(f"boom on {response!r}")
        flaky = options.get("flaky_marker")
        if flaky and not os.path.exists(flaky):
            open(flaky, "w").close()
            return Grade.error("sandbox_error: container failed to start", retryable=True)
        if options.get("sleep_s"):
            time.sleep(float(options["sleep_s"]))
        gate = options.get("gate")
        if gate and int(response) >= int(options["gate_from"]):
            while not os.path.exists(gate):  # held until the test opens the gate: an event, not a delay
                time.sleep(0.05)
        pid = os.getpid()
        if response == str(ground_truth):
            return Grade.correct("match", answer=response, pid=pid)
        return Grade.incorrect("mismatch", answer=response, pid=pid)


class SelfKillingGrader:
    """SIGKILLs its own worker the first time it sees a response whose marker file does not exist yet."""

    name = "selfkill"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        marker = options["marker"]
        if not os.path.exists(marker):
            with open(marker, "w") as fh:
                fh.write(str(os.getpid()))
            os.kill(os.getpid(), 9)
        return Grade.correct("survived retry")


class SlowStartGrader:
    """Needs 1.5 s to start (like a grader importing SymPy in helpers); its ``warm`` hook does that up front."""

    name = "slowstart"
    version = "1"

    def __init__(self) -> None:
        self.warmed = False

    def warm(self) -> None:
        time.sleep(1.5)
        self.warmed = True

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        if not self.warmed:
            self.warm()
        return Grade.correct("warm")


def _fail_to_load() -> None:
    raise RuntimeError("this object cannot be rebuilt")


class _Unloadable:
    """Pickles, but unpickling it raises."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_fail_to_load, ())


class _KillsInSend:
    """Pickles harmlessly, except inside a ``send`` (the worker shipping its results): then it SIGKILLs the
    process, like a worker dying while it sends a finished grade (the result is lost after the grade)."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == "send":
                os.kill(os.getpid(), signal.SIGKILL)
            frame = frame.f_back
        return (str, ("harmless",))


class PoisonGrader:
    """Returns a grade whose details cannot make the trip back: ``kind`` = lambda | unloadable | kills_in_send."""

    name = "poison"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        kind = options.get("kind")
        if kind == "lambda":
            return Grade.correct("poisoned", value=lambda: None)
        if kind == "unloadable":
            return Grade.correct("poisoned", value=_Unloadable())
        if kind == "kills_in_send":
            return Grade.correct("poisoned", value=_KillsInSend())
        return Grade.correct("clean", pid=os.getpid())


class SpawningGrader:
    """Starts processes that leave the worker's process group: a ``setsid`` child and a double-forked
    daemon (parent pid 1 at once), appends their pids to ``pid_file``, then grades (or hangs, ``hang``)."""

    name = "spawning"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        child = subprocess.Popen(["sleep", "600"], start_new_session=True)
        daemon = subprocess.run(
            ["sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        with open(options["pid_file"], "a") as fh:
            fh.write(f"{child.pid}\n{daemon}\n")
        if options.get("hang"):
            while True:
                time.sleep(0.05)
        return Grade.correct("spawned", pid=os.getpid())


class LeakingGrader:
    """Keeps ``mb`` MiB per grade alive forever (a grader with a memory leak); reports its worker's pid."""

    name = "leaking"
    version = "1"
    kept: list[bytearray] = []

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        block = bytearray(int(options.get("mb", 0)) << 20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page: resident, not just reserved
        self.kept.append(block)
        return Grade.correct("leaked", pid=os.getpid())


class ChannelWriterGrader:
    """Writes garbage into every pipe its process can write to (the worker's result channel among them) and
    prints to stdout, then grades normally."""

    name = "channel_writer"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        print("grader chatter on stdout")
        if options.get("garbage"):
            for name in os.listdir("/proc/self/fd"):
                fd = int(name)
                try:
                    if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_WRONLY:
                        os.write(fd, b"\x00garbage\xff" * 64)
                except OSError:
                    continue
        return Grade.correct("wrote", pid=os.getpid())


class DockerGrader:
    """Runs ``true`` in a warm Docker sandbox (its containers stay up for the next grade), writes its
    worker's pid to ``pid_file``, then grades -- or hangs (``hang``), so the pool kills the worker."""

    name = "docker_user"
    version = "1"
    _sandbox: Any = None

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        from sandboxes import RunRequest, open_sandbox

        if DockerGrader._sandbox is None:
            DockerGrader._sandbox = open_sandbox("docker", pool_size=2)
        result = DockerGrader._sandbox.run(RunRequest(["true"]))
        with open(options["pid_file"], "w") as fh:
            fh.write(str(os.getpid()))
        if options.get("hang"):
            while True:
                time.sleep(0.05)
        return Grade.correct("ran", exit_code=result.exit_code)
