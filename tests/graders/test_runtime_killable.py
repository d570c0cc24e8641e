"""The killable-worker primitive on its own: the whole tree goes, with a kill or with its owner."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

from rrl_testutil import still_alive

from graders.runtime.killable import KillableProcess

# A worker that starts a setsid grandchild, reports both pids on its channel, then waits forever.
WORKER = (
    "import os, subprocess, time\n"
    "from graders.runtime.killable import child_channel\n"
    "r, w = child_channel()\n"
    "child = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    "os.write(w, f'{os.getpid()} {child.pid}\\n'.encode())\n"
    "while True:\n"
    "    time.sleep(1)\n"
)


def _module(tmp_path: os.PathLike[str]) -> dict[str, str]:
    path = os.path.join(tmp_path, "tree_worker.py")
    with open(path, "w") as fh:
        fh.write(WORKER)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *filter(None, sys.path)]))


def _pids(fd: int) -> list[int]:
    assert select.select([fd], [], [], 60)[0], "the worker never reported"
    return [int(x) for x in os.read(fd, 100).split()]


def test_kill_takes_the_worker_and_its_setsid_children(tmp_path: os.PathLike[str]) -> None:
    proc = KillableProcess("tree_worker", env=_module(tmp_path))
    worker, grandchild = _pids(proc.from_child)
    assert proc.pid == worker != proc.proc.pid  # the worker, not its keeper
    assert proc.rss_bytes() > 1 << 20
    proc.kill()
    assert still_alive([worker, grandchild]) == []
    assert proc.poll() is not None


def test_a_worker_killed_from_outside_takes_its_children(tmp_path: os.PathLike[str]) -> None:
    proc = KillableProcess("tree_worker", env=_module(tmp_path))
    worker, grandchild = _pids(proc.from_child)
    os.kill(worker, signal.SIGKILL)
    assert still_alive([worker, grandchild]) == []  # the keeper cleaned up before anyone asked it to
    assert os.read(proc.from_child, 10) == b""  # and the owner sees the channel close
    proc.kill()


def test_the_tree_dies_with_its_owner(tmp_path: os.PathLike[str]) -> None:
    owner_code = (
        "import os, select, sys, time\n"
        "from graders.runtime.killable import KillableProcess\n"
        "proc = KillableProcess('tree_worker')\n"
        "select.select([proc.from_child], [], [], 60)\n"
        "sys.stdout.write(os.read(proc.from_child, 100).decode())\n"
        "sys.stdout.flush()\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", owner_code], env=_module(tmp_path), stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    worker, grandchild = (int(x) for x in owner.stdout.readline().split())
    owner.kill()
    owner.wait()
    assert still_alive([worker, grandchild]) == []
