"""The one killable-worker primitive: a Python worker process that can always be killed with everything it
started, talking to its owner over a private pair of pipes.

Used by the grading runtime's local workers (``graders.runtime.local`` / ``procworker``) and by the warm
helpers of ``graders.runtime.helper_pool`` (the math grader's SymPy, the code grader's checks); each speaks
its own protocol over the channel.

- Whole tree: the worker runs under a keeper (``graders/runtime/keeper.py``), a child subreaper that kills
  every process left below it once the worker is gone, including ones in a new session whose parent died.
- Private channel: the worker finds its channel fds in ``CHANNEL_ENV`` and moves them, close-on-exec, to
  high fd numbers (``child_channel``); its stdin becomes /dev/null and its stdout goes to its stderr, so
  nothing the code running in it prints, and no process it starts, can write into the channel.
- Dies with its owner: the keeper holds a lifeline pipe to the owner and kills the tree when it closes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

CHANNEL_ENV = "RRL_WORKER_CHANNEL"
KEEPER = str(Path(__file__).with_name("keeper.py"))
KILL_WAIT_S = 15.0  # the keeper's own reaping deadline is 10 s; past this it is killed with its group
_PRIVATE_FD_MIN = 200
_PAGE = os.sysconf("SC_PAGE_SIZE")


class KillableProcess:
    """``python -m module args...`` under a keeper; ``to_child`` / ``from_child`` are the owner's channel ends.

    ``kill()`` SIGKILLs the worker and all its descendants and waits until they are gone; it must be called
    once the worker is no longer wanted, also after it exited on its own (it closes the channel).
    """

    def __init__(
        self,
        module: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        pass_fds: Sequence[int] = (),
        stderr: int | None = None,
    ) -> None:
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        lifeline_r, self._lifeline = os.pipe()
        self._pid_r, pid_w = os.pipe()
        child_env = dict(os.environ if env is None else env)
        child_env[CHANNEL_ENV] = f"{to_child_r},{from_child_w}"
        argv = [sys.executable, "-m", module, *args]
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", KEEPER, str(lifeline_r), str(pid_w), *argv],
                pass_fds=(to_child_r, from_child_w, lifeline_r, pid_w, *pass_fds),
                start_new_session=True,  # a SIGKILL of the group cannot reach the owner, nor the owner's Ctrl-C it
                env=child_env,
                stdin=subprocess.DEVNULL,
                stderr=stderr,
            )
        except BaseException:
            for fd in (self.to_child, self.from_child, self._lifeline, self._pid_r):
                os.close(fd)
            raise
        finally:
            for fd in (to_child_r, from_child_w, lifeline_r, pid_w):
                os.close(fd)
        self._pid: int | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The worker's pid (not the keeper's); waits for the keeper to report it (it does so at once)."""
        return self._worker_pid(10.0)

    def _worker_pid(self, wait_s: float) -> int | None:
        """The worker's pid once the keeper reported it (waiting up to ``wait_s``); None if it has not."""
        if self._pid is None and not self._closed:
            ready, _, _ = select.select([self._pid_r], [], [], wait_s)
            if ready:
                data = os.read(self._pid_r, 32)
                self._pid = int(data) if data else None
        return self._pid

    def rss_bytes(self) -> int:
        """The worker's resident memory now (0 once it is gone)."""
        pid = self._worker_pid(0.0)
        return 0 if pid is None else rss_bytes(pid)

    def kill(self) -> None:
        """SIGKILL the worker and everything it started, wait for them, close the channel. Idempotent."""
        if self._closed:
            return
        with contextlib.suppress(OSError):  # keeper already gone: nothing to tell it
            os.write(self._lifeline, b"k")
        os.close(self._lifeline)
        if not self.wait(KILL_WAIT_S):  # should not happen: the keeper never blocks for long
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait()
        for fd in (self.to_child, self.from_child, self._pid_r):
            os.close(fd)
        self._closed = True

    def poll(self) -> int | None:
        """The exit status once the worker and its keeper are gone, else None."""
        return self.proc.poll()

    def wait(self, timeout: float) -> bool:
        """Whether the worker (and its keeper) exited within ``timeout`` seconds; kills nothing.

        Waits on a pidfd where there is one: ``Popen.wait(timeout)`` polls with sleeps of up to 50 ms,
        which made every kill (each time-out of a SymPy helper or grading worker) take ~35 ms.
        """
        if self.proc.poll() is None:
            try:
                pidfd = os.pidfd_open(self.proc.pid)
            except (AttributeError, OSError):  # not Linux >= 5.3: Popen's polling wait below
                pidfd = -1
            if pidfd >= 0:
                try:
                    select.select([pidfd], [], [], timeout)
                finally:
                    os.close(pidfd)
                timeout = 0.0
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode


def rss_bytes(pid: int | str = "self") -> int:
    """A process's resident memory now (0 once it is gone, or where there is no /proc)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):  # exited meanwhile, or not Linux
        return 0


def child_channel() -> tuple[int, int]:
    """In the worker, before anything else runs: its private (read, write) channel fds.

    They move to high, close-on-exec fd numbers; stdin becomes /dev/null and stdout goes to stderr, so a
    print, a stray ``os.write(1, ...)`` or a subprocess of code running here cannot corrupt the channel.
    """
    spec = os.environ.pop(CHANNEL_ENV)
    private = []
    for fd in (int(x) for x in spec.split(",")):
        private.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _PRIVATE_FD_MIN))
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return private[0], private[1]
