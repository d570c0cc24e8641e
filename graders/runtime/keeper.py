"""Keeper of one killable worker: ``python -I -S keeper.py LIFELINE_FD PID_FD ARGV...`` (stdlib only).

A worker can start processes that leave its process group and session (the math grader's SymPy helpers,
a plugin's ``setsid`` daemons), and once the worker dies they are re-parented to init, where nobody can
find them. The keeper closes that hole: it makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so
every orphan of the worker's tree is re-parented to it rather than to init, starts the worker, and when the
worker exits -- on its own, killed from outside, or because the keeper was told to kill it -- it SIGKILLs
everything left below itself and exits with the worker's status. So "the worker and everything it
started" is always exactly the keeper's subtree.

It is told to kill through the lifeline pipe (a byte, or EOF when the owner's end closes, e.g. because the
owner died); it also watches its parent pid, in case a fork of the owner keeps the lifeline open. It
writes the worker's pid to PID_FD once, so the owner can read the worker's memory use and report its pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
PARENT_CHECK_S = 1.0
REAP_DEADLINE_S = 10.0  # a process stuck in uninterruptible sleep must not keep the keeper forever


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (a full /proc scan: it runs only when a worker is gone)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # exited meanwhile
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])  # after "pid (comm) state"
        children.setdefault(ppid, []).append(int(name))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def _reap() -> list[tuple[int, int]]:
    """(pid, status) of every exited child, without blocking."""
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, status))


def _kill_tree() -> None:
    """SIGKILL every descendant until none is left (orphans of killed ones are re-parented to us)."""
    deadline = time.monotonic() + REAP_DEADLINE_S
    me = os.getpid()
    while time.monotonic() < deadline:
        _reap()
        left = _descendants(me)
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)


def _start(argv: list[str], keep_closed: list[int], libc: ctypes.CDLL) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:  # the worker: default signals, dies with its keeper, none of the keeper's fds
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        for fd in keep_closed:
            os.close(fd)
        os.execv(argv[0], argv)
    finally:
        os._exit(127)


def main(lifeline: int, pid_fd: int, argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"keeper: PR_SET_CHILD_SUBREAPER failed (errno {ctypes.get_errno()})", file=sys.stderr)
        return 126
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the owner's business
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the poll below through the wakeup fd
    parent = os.getppid()
    worker = _start(argv, [lifeline, pid_fd, wake_r, wake_w], libc)
    os.write(pid_fd, str(worker).encode())
    os.close(pid_fd)
    # The worker has inherited the channel fds; our copies must go, or the owner would not see EOF when
    # the worker dies.
    low = 3
    for keep in sorted((lifeline, wake_r, wake_w)):
        os.closerange(low, keep)
        low = keep + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
    poller = select.poll()
    poller.register(lifeline, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    status: int | None = None
    killing = False
    while status is None:
        for fd, _ in poller.poll(PARENT_CHECK_S * 1000):
            if fd == wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
            elif not killing:  # a kill request, or EOF: the owner is gone
                killing = True
                poller.unregister(lifeline)
        if not killing and os.getppid() != parent:
            killing = True
        if killing:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
        for pid, st in _reap():
            if pid == worker:
                status = st
    _kill_tree()
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    code = main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
    # Killed by signal N: 128 + N, as a shell reports it. _exit: no interpreter teardown to wait for.
    os._exit(code if code >= 0 else 128 - code)
