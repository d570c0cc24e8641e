"""Docker backend: hardened containers, run cold (one container per run) or from a warm pool of pre-started
containers, each with one long-lived supervisor reached through an attached exec socket (so a run costs a
socket round trip, not a ``docker exec``); the supervisor kills leftovers and wipes scratch dirs after each run,
and a container that misbehaves is replaced. Every container is labelled and removed, stale ones at start."""

from __future__ import annotations

import atexit
import logging
import os
import socket
import struct
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Literal

from sandboxes import protocol
from sandboxes.image import DEFAULT_IMAGE
from sandboxes.pool import Pool
from sandboxes.sessions import Held
from sandboxes.types import Mount, RunRequest, RunResult, SandboxError

log = logging.getLogger(__name__)

LABEL = "reasoning-rl.sandbox"
SANDBOX_USER = "65534:65534"
# Container start, exec set-up and Python start-up on a loaded machine; after this the parent kills the container.
GRACE_S = 5.0
_SUPERVISOR_STDERR_CAP = 64 << 10
_HOST = socket.gethostname()


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """What is fixed when a container starts; runs with equal specs can share a warm container."""

    image: str
    memory_mb: int
    pids: int
    cpus: float
    disk_mb: int
    mounts: tuple[Mount, ...]

    @classmethod
    def of(cls, image: str, request: RunRequest) -> ContainerSpec:
        lim = request.limits
        return cls(image, lim.memory_mb, lim.pids, lim.cpus, lim.disk_mb, tuple(request.mounts))


_client_lock = threading.Lock()
_client: Any = None


def client() -> Any:
    """One shared Docker client; stale containers of dead owners are removed on first use."""
    global _client
    with _client_lock:
        if _client is None:
            import docker

            try:
                c = docker.from_env(timeout=30, max_pool_size=64)
                c.ping()
            except Exception as exc:  # noqa: BLE001 - any failure here means "Docker is unusable", say why
                raise SandboxError(
                    f"Docker daemon not reachable ({exc}); start it (scripts/services.d/10-docker.sh) "
                    "or use the local backend"
                ) from exc
            remove_stale(c)
            _client = c
        return _client


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(c: Any) -> int:
    """Remove our labelled containers whose owning process (on this host) is gone, e.g. after a crash.

    Other processes start and remove their own containers meanwhile: one that is gone between the listing and
    its inspection is skipped (``ignore_removed``), else that race failed a whole grader's start (CI, 404)."""
    removed = 0
    for container in c.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True):
        labels = container.labels
        owner = labels.get(f"{LABEL}.pid", "")
        if labels.get(f"{LABEL}.host") != _HOST or (owner.isdigit() and _alive(int(owner))):
            continue  # another machine's (shared daemon) or a live process's: not ours to remove
        try:
            container.remove(force=True)
            removed += 1
        except Exception as exc:  # noqa: BLE001 - another process may be removing it concurrently
            log.debug("stale container %s not removed: %s", container.short_id, exc)
    if removed:
        log.info("removed %d stale sandbox containers", removed)
    return removed


def start_container(spec: ContainerSpec) -> Any:
    """A hardened, idle container: PID 1 is tini (reaps orphans) running ``sleep`` as root without capabilities;
    programs run through exec as an unprivileged user."""
    tmpfs_opts = f"size={spec.disk_mb}m,uid=65534,gid=65534"
    return client().containers.run(
        spec.image,
        command=["sleep", "infinity"],
        detach=True,
        init=True,
        user="0:0",
        network_mode="none",
        mem_limit=f"{spec.memory_mb}m",
        memswap_limit=f"{spec.memory_mb}m",
        pids_limit=spec.pids,
        nano_cpus=int(spec.cpus * 1e9),
        read_only=True,
        tmpfs={protocol.WORKDIR: tmpfs_opts, "/tmp": tmpfs_opts},
        shm_size="16m",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        ulimits=[{"Name": "core", "Soft": 0, "Hard": 0}, {"Name": "nofile", "Soft": 1024, "Hard": 1024}],
        volumes={m.source: {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in spec.mounts},
        working_dir=protocol.WORKDIR,
        labels={LABEL: "1", f"{LABEL}.pid": str(os.getpid()), f"{LABEL}.host": _HOST},
    )


@dataclass
class Box:
    """A started container plus its long-lived supervisor, attached through one exec socket: each run is a
    request written to that socket, so no ``docker exec`` (runc start-up) happens per run."""

    container: Any
    response: Any  # the hijacked HTTP response; kept so the socket is not garbage-collected
    sock: socket.socket


def start_box(spec: ContainerSpec) -> Box:
    container = start_container(spec)
    try:
        api = client().api
        exec_id = api.exec_create(
            container.id,
            protocol.supervisor_command(),
            stdin=True,
            user=SANDBOX_USER,
            workdir=protocol.WORKDIR,
            environment=protocol.BASE_ENV,
        )["Id"]
        response = api.exec_start(exec_id, socket=True)
    except BaseException:
        remove_container(container)
        raise
    return Box(container, response, _raw_socket(response))


def remove_box(box: Box) -> None:
    try:
        box.sock.close()
    except OSError as exc:
        log.debug("closing supervisor socket: %s", exc)
    remove_container(box.container)


def remove_container(container: Any) -> None:
    try:
        container.remove(force=True)
    except Exception as exc:  # noqa: BLE001 - already gone is fine; anything else is left for remove_stale
        log.debug("container %s not removed: %s", getattr(container, "short_id", "?"), exc)


def _raw_socket(sock: Any) -> socket.socket:
    return sock._sock if hasattr(sock, "_sock") else sock


class _StreamReader:
    """Demultiplexes Docker's attach stream (8-byte headers) with a deadline and byte caps."""

    def __init__(self, sock: socket.socket, deadline: float, caps: dict[int, int]) -> None:
        self.sock, self.deadline, self.caps = sock, deadline, caps
        self.data: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self._buf = bytearray()

    def _recv(self) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)
        return self.sock.recv(1 << 16)

    def read_frame(self) -> Literal["frame", "eof", "overflow"]:
        while True:
            chunk = self._recv()
            if not chunk:
                return "eof"
            self._buf += chunk
            while len(self._buf) >= 8:
                stream, size = self._buf[0], struct.unpack(">I", bytes(self._buf[4:8]))[0]
                if len(self._buf) < 8 + size:
                    break
                target = self.data.setdefault(stream, bytearray())
                target += self._buf[8 : 8 + size]
                del self._buf[: 8 + size]
                if len(target) > self.caps.get(stream, 0):
                    return "overflow"
            size = protocol.frame_size(self.data[1])
            if size is not None:
                del self.data[1][size:]
                return "frame"


class DockerSandbox:
    """``warm=True`` reuses pre-started containers and their supervisors; ``warm=False`` starts one per run."""

    name = "docker"
    isolation: Literal["strong", "weak"] = "strong"

    def __init__(
        self, image: str = DEFAULT_IMAGE, pool_size: int = 4, warm: bool = True, prestart: bool = True
    ):
        c = client()
        import docker

        try:
            c.images.get(image)
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(f"sandbox image {image} not found; build it with `rrl sandbox build`") from exc
        self.image, self.warm = image, warm
        self._pool = Pool(start_box, remove_box, pool_size)
        self._held: Held[tuple[ContainerSpec, Box]] = Held(pool_size, self._give_back)
        if warm and prestart:  # containers for the default limits, so the first runs are already warm
            self._pool.prestart(ContainerSpec.of(image, RunRequest([])))
        _OPEN.add(self)

    def run(self, request: RunRequest) -> RunResult:
        spec = ContainerSpec.of(self.image, request)
        if request.session and self.warm:
            return self._run_session(request, spec)
        started = time.monotonic()
        try:
            box = self._pool.acquire(spec) if self.warm else start_box(spec)
        except Exception as exc:  # noqa: BLE001 - daemon/API failures are ours, never the program's
            return RunResult(
                b"", b"", None, time.monotonic() - started, "sandbox_error", f"container start: {exc}"
            )
        healthy = False
        try:
            result, healthy = self._request(box, request, started)
            return result
        finally:
            if self.warm:
                self._pool.release(spec, box, healthy)
            else:
                remove_box(box)

    def _run_session(self, request: RunRequest, spec: ContainerSpec) -> RunResult:
        """A session's run on its held container (see ``sandboxes.sessions``); on a new one, the interpreter
        is set up (preload, history) in a run of its own first, off the cell's clock."""
        held = self._held.take(request.session)
        if held is not None and held[0] != spec:  # other limits: a new container, the old one cleaned
            self._give_back(held)
            held = None
        phase: protocol.SessionPhase = "continue"
        if held is None:
            self._held.make_room()
            try:
                box = self._pool.acquire(spec)
            except Exception as exc:  # noqa: BLE001 - daemon/API failures are ours, never the program's
                return RunResult(b"", b"", None, 0.0, "sandbox_error", f"container start: {exc}")
            split = protocol.split_restore(request)
            if split is None:
                phase = "start"
            else:
                restore, request = split
                result, healthy = self._request(box, restore, time.monotonic(), "start")
                if not (healthy and result.ok):
                    self._pool.release(spec, box, False)
                    return protocol.restore_failed(result)
        else:
            box = held[1]
        result, healthy = self._request(box, request, time.monotonic(), phase)
        if healthy and result.cell != "died":
            self._held.keep(request.session, (spec, box))
        elif healthy:  # its interpreter ended: the next call sets one up again on a clean container
            self._give_back((spec, box))
        else:
            self._pool.release(spec, box, False)
        return result

    def _give_back(self, held: tuple[ContainerSpec, Box]) -> None:
        """Clean a session's container with an ordinary run (the supervisor's full clean-up), then pool it."""
        spec, box = held
        result, healthy = self._request(box, RunRequest(["true"]), time.monotonic())
        self._pool.release(spec, box, healthy and result.ok)

    def end_session(self, session: str) -> None:
        self._held.end(session)

    def _request(
        self, box: Box, request: RunRequest, started: float, session: protocol.SessionPhase = ""
    ) -> tuple[RunResult, bool]:
        payload = protocol.encode(request, kill_all=True, session=session)
        cap = request.limits.output_bytes
        reader = _StreamReader(
            box.sock,
            started + request.limits.wall_s + GRACE_S,
            {1: 2 * cap + 4096, 2: _SUPERVISOR_STDERR_CAP},
        )
        try:
            box.sock.sendall(payload.data)
            outcome = reader.read_frame()
        except TimeoutError:
            self._kill(box.container)
            wall = time.monotonic() - started
            return RunResult(b"", b"", None, wall, "timeout", "wall clock: whole container killed"), False
        except OSError as exc:
            return self._infra_failure(box.container, started, f"supervisor stream: {exc}"), False
        wall = time.monotonic() - started
        if outcome == "overflow":
            self._kill(box.container)
            return RunResult(
                b"", b"", None, wall, "output_limit", "output beyond the cap: container killed"
            ), False
        frame = protocol.decode(bytes(reader.data[1]), payload.nonce, wall) if outcome == "frame" else None
        if frame is not None:
            return frame.result, frame.clean
        return self._lost_frame(box.container, wall, bytes(reader.data[2])), False

    def _lost_frame(self, container: Any, wall: float, stderr: bytes) -> RunResult:
        """No frame: the program killed its supervisor (its fault) unless the container itself is gone (ours)."""
        try:
            container.reload()
            state = container.attrs["State"]
        except Exception as exc:  # noqa: BLE001
            return RunResult(b"", stderr, None, wall, "sandbox_error", f"container vanished: {exc}")
        if state.get("OOMKilled"):
            return RunResult(b"", stderr, None, wall, "memory", "container OOM-killed")
        if not state.get("Running"):
            return RunResult(
                b"", stderr, None, wall, "sandbox_error", f"container stopped: {state.get('Status')}"
            )
        return protocol.supervisor_lost(wall, stderr)

    def _infra_failure(self, container: Any, started: float, detail: str) -> RunResult:
        self._kill(container)
        return RunResult(b"", b"", None, time.monotonic() - started, "sandbox_error", detail)

    @staticmethod
    def _kill(container: Any) -> None:
        try:
            container.kill()
        except Exception as exc:  # noqa: BLE001 - it is replaced either way
            log.debug("kill %s: %s", getattr(container, "short_id", "?"), exc)

    def close(self) -> None:
        for _, box in self._held.close():
            remove_box(box)
        self._pool.close()
        _OPEN.discard(self)


_OPEN: weakref.WeakSet[DockerSandbox] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for sandbox in list(_OPEN):
        sandbox.close()
