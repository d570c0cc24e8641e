"""No System V or POSIX IPC object outlives a run in a warm container or local namespace: shared memory (charged to the
container's memory cgroup), message queues and semaphores of both families are gone before the next run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sandboxes
from sandboxes import RunRequest
from sandboxes.types import Sandbox

SYSV = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(0, 48 << 20, 0o1666)  # IPC_PRIVATE: a new segment per run
ctypes.memset(libc.shmat(shmid, None, 0), 1, 48 << 20)  # touched: charged to the container's memory
msq = libc.msgget(0x5152, 0o1666)
class Msg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 16)]
libc.msgsnd(msq, ctypes.byref(Msg(1, b"secret")), 16, 0)
semid = libc.semget(0x5153, 1, 0o1666)
print(min(shmid, msq, semid) >= 0)
"""
POSIX = r"""
import ctypes, os
from multiprocessing import shared_memory
rt = ctypes.CDLL("librt.so.1", use_errno=True)
mq = rt.mq_open(b"/rrl-queue", os.O_CREAT | os.O_RDWR, 0o666, None)
rt.sem_open.restype = ctypes.c_void_p
sem = rt.sem_open(b"/rrl-sem", os.O_CREAT, 0o666, 1)
shm = shared_memory.SharedMemory("rrl-shm", create=True, size=8 << 20)
shm.buf[:6] = b"secret"
print(mq >= 0 and sem is not None, sorted(os.listdir("/dev/mqueue")), sorted(os.listdir("/dev/shm")), flush=True)
os._exit(0)  # no resource-tracker clean-up: leave them behind on purpose
"""
LOOK = r"""
import os
print([len(open("/proc/sysvipc/" + k).read().splitlines()) - 1 for k in ("shm", "msg", "sem")],
      os.listdir("/dev/mqueue"), os.listdir("/dev/shm"))
"""


@pytest.fixture(scope="module", params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def one_container(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A pool of one (Docker) or one thread's warm namespace (local): every run lands in the same warm
    sandbox (as long as it stays clean)."""
    sb = sandboxes.open_sandbox(request.param, **({"pool_size": 1} if request.param == "docker" else {}))
    yield sb
    sb.close()


def test_system_v_ipc_is_removed_between_runs(one_container: Sandbox) -> None:
    made = one_container.run(RunRequest(["python3", "-c", SYSV]))
    assert made.stdout == b"True\n", made
    left = one_container.run(RunRequest(["python3", "-c", LOOK]))
    assert left.stdout == b"[0, 0, 0] [] []\n", left


def test_posix_ipc_is_removed_between_runs(one_container: Sandbox) -> None:
    made = one_container.run(RunRequest(["python3", "-c", POSIX]))
    assert made.stdout == b"True ['rrl-queue'] ['rrl-shm', 'sem.rrl-sem']\n", made
    left = one_container.run(RunRequest(["python3", "-c", LOOK]))
    assert left.stdout == b"[0, 0, 0] [] []\n", left


def test_shared_memory_left_behind_does_not_starve_the_next_run(one_container: Sandbox) -> None:
    """Four runs each pin 48 MB of SysV shared memory; without removal the 128 MB container would OOM."""
    limits = sandboxes.Limits(memory_mb=128)
    for _ in range(4):
        assert one_container.run(RunRequest(["python3", "-c", SYSV], limits=limits)).stdout == b"True\n"
    honest = one_container.run(
        RunRequest(["python3", "-c", "x = bytearray(64 << 20)\nprint('ok')"], limits=limits)
    )
    assert (honest.stdout, honest.stopped_by) == (b"ok\n", "exit"), honest
