"""Local fallback for machines without Docker: bubblewrap namespaces (no network, own pid and IPC namespace,
read-only system dirs, tmpfs work dir) plus rlimits, and a cgroup leaf for the aggregate memory and pids
limits. Warm like Docker's pool: a namespace and its supervisor serve run after run (the supervisor kills every
leftover process, wipes the scratch dirs and IPC between runs; a run that is not clean, hits a limit or times
out retires the namespace and its leaf), which saves bubblewrap's start, the cgroup join (~12 ms on cgroup v1)
and the supervisor's python start on every run. The supervisor is the namespace's PID 1 (no bubblewrap init
with the trainer's environment and pipes; bubblewrap itself starts with a bare environment). WEAKER than
Docker: host system dirs are readable. Without a writable cgroup the limits are only
rlimits: per process for memory (forks multiply it) and none for pids as root, so as root it refuses to run
untrusted code unless ``unbounded=True`` is asked for explicitly; otherwise it warns once."""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Literal

from sandboxes import protocol
from sandboxes.cgroup import Cgroups, Leaf
from sandboxes.image import rootfs_dir
from sandboxes.sessions import Held
from sandboxes.types import RunRequest, RunResult, SandboxError

log = logging.getLogger(__name__)

GRACE_S = 5.0
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc")
_SANDBOX_UID = 65534
_STDERR_CAP = 16 << 10  # the supervisor's own stderr: only bubblewrap's or python's failure report
_BWRAP_ENV = {"PATH": "/usr/bin:/bin"}
_IDLE_PER_THREAD = 2  # warm boxes a thread keeps (one per distinct bwrap command line and limits)
_warned = False


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError("bubblewrap not found: install it (apt-get install -y bubblewrap) or use Docker")
    return path


def _python(root: str) -> str:
    for candidate in ("/usr/bin/python3", "/bin/python3"):
        if os.path.exists(root + candidate):
            return candidate
    raise SandboxError(f"no python3 under {root}/usr/bin: the local sandbox only sees system dirs")


def _root(image: str | None) -> str:
    """Where the system dirs come from: the host ("") or the root fs ``rrl sandbox build`` kept for ``image``."""
    if image is None:
        return ""
    root = rootfs_dir(image)
    if not root.is_dir():
        raise SandboxError(
            f"no root fs for image {image} at {root}: build it with `rrl sandbox build` (as root)"
        )
    return str(root)


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(message)


class LocalSandbox:
    """Warm bubblewrap namespaces, each in its own cgroup leaf, kept per thread and per (command line, limits);
    killing bwrap and the leaf kills everything inside it."""

    name = "local"
    isolation: Literal["strong", "weak"] = "weak"

    def __init__(self, unbounded: bool = False, image: str | None = None, max_sessions: int = 8) -> None:
        """``image``: mount the system dirs from that image's root fs (the Docker image's files), not the
        host's; ``max_sessions``: namespaces held by sessions at once (``sandboxes.sessions``)."""
        self._bwrap = bwrap_path()
        self._root = _root(image)
        self._python = _python(self._root)
        self._held: Held[tuple[_Key, _Box]] = Held(max_sessions, self._give_back)
        self._cgroups = Cgroups.find()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._boxes: set[_Box] = set()
        self.limits_note = (
            "cgroup memory + pids limits" if self._cgroups else "rlimits only (no writable cgroup)"
        )
        if self._cgroups is None:
            if os.geteuid() == 0 and not unbounded:
                raise SandboxError(
                    "the local sandbox cannot bound processes or total memory as root without a writable cgroup "
                    "(v2 with memory+pids, or v1 memory and pids); use Docker, run as a normal user, or pass "
                    "unbounded=True to accept that"
                )
            _warn_once(
                "local sandbox without a writable cgroup: memory is limited per process only"
                + ("" if os.geteuid() else ", and the number of processes not at all (root)")
            )

    def _argv(self, request: RunRequest) -> list[str]:
        lim = request.limits
        argv = [
            self._bwrap,
            "--unshare-all",
            "--unshare-user",
            "--uid",
            str(_SANDBOX_UID),
            "--gid",
            str(_SANDBOX_UID),
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",  # the (undumpable) supervisor is PID 1: no bubblewrap init holding the parent's
            # environment and the trusted pipes where the program could ptrace or read it
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",  # its own mount: stays writable when /dev is made read-only below
            "/dev/shm",
            "--mqueue",  # POSIX queues of the namespace visible, so the supervisor removes them between runs
            "/dev/mqueue",
        ]
        for d in _SYSTEM_DIRS:
            argv += ["--ro-bind-try", self._root + d, d]
        size = str(lim.disk_mb << 20)
        argv += ["--size", size, "--tmpfs", protocol.WORKDIR, "--size", size, "--tmpfs", "/tmp"]
        for m in request.mounts:
            argv += ["--ro-bind" if m.read_only else "--bind", m.source, m.target]
        # bubblewrap's root and /dev are tmpfs writable by the sandbox user: read-only, since the namespace
        # outlives the run and only the scratch dirs are wiped between runs
        argv += ["--chdir", protocol.WORKDIR, "--remount-ro", "/dev", "--remount-ro", "/"]
        return argv + protocol.supervisor_command(self._python)

    def run(self, request: RunRequest) -> RunResult:
        key = _Key(tuple(self._argv(request)), request.limits.memory_mb, request.limits.pids)
        held = self._held.take(request.session) if request.session else None
        if held is not None and (held[0] != key or held[1].proc.poll() is not None):
            self._give_back(held)  # other limits, or died: the session starts over in a clean box
            held = None
        if held is not None:
            result, healthy, sent = self._request(held[1], request, "continue")
            if sent:
                return self._after(request, key, held[1], result, healthy)
            self._discard(held[1])  # it died before it read the request: start over in a new box
        phase: protocol.SessionPhase = "start" if request.session else ""
        split = protocol.split_restore(request) if request.session else None
        if split is not None:  # the interpreter is set up in a run of its own, off the cell's clock
            restore, request = split
            box, result, healthy = self._first(key, restore, "start")
            if box is None or not (healthy and result.ok):
                if box is not None:
                    self._discard(box)
                return protocol.restore_failed(result)
            result, healthy, _ = self._request(box, request, "continue")
            return self._after(request, key, box, result, healthy)
        box, result, healthy = self._first(key, request, phase)
        return result if box is None else self._after(request, key, box, result, healthy)

    def _first(
        self, key: _Key, request: RunRequest, phase: protocol.SessionPhase
    ) -> tuple[_Box | None, RunResult, bool]:
        """A warm (or new) box's first request of this run; a warm box that died before it read the request
        is replaced once."""
        for attempt in (1, 2):
            box = self._take(key)
            if isinstance(box, RunResult):
                return None, box, False
            result, healthy, sent = self._request(box, request, phase)
            if sent or attempt == 2:
                return box, result, healthy
            self._discard(box)
        raise AssertionError("unreachable")

    def _after(
        self, request: RunRequest, key: _Key, box: _Box, result: RunResult, healthy: bool
    ) -> RunResult:
        if healthy and request.session and result.cell != "died":
            self._held.keep(request.session, (key, box))
        elif healthy and request.session:  # its interpreter ended: the next call sets one up again, cleanly
            self._give_back((key, box))
        elif healthy:
            self._idle().setdefault(key, box)
        else:
            self._discard(box)
        return result

    def _give_back(self, held: tuple[_Key, _Box]) -> None:
        """Clean a session's box with an ordinary run (the supervisor's full clean-up), then keep it warm."""
        key, box = held
        if box.proc.poll() is None:
            result, healthy, _ = self._request(box, RunRequest(["true"]))
            idle = self._idle()
            if healthy and result.ok and key not in idle and len(idle) < _IDLE_PER_THREAD:
                idle[key] = box
                return
        self._discard(box)

    def end_session(self, session: str) -> None:
        self._held.end(session)

    def _idle(self) -> dict[_Key, _Box]:
        """This thread's warm boxes: bubblewrap dies with the thread that started it (--die-with-parent)."""
        idle: dict[_Key, _Box] | None = getattr(self._local, "idle", None)
        if idle is None or self._local.pid != os.getpid():  # a forked child: the boxes are its parent's
            if getattr(self._local, "pid", os.getpid()) != os.getpid():
                with self._lock:
                    self._boxes = set()
            idle = self._local.idle = {}
            self._local.pid = os.getpid()
        return idle

    def _take(self, key: _Key) -> _Box | RunResult:
        idle = self._idle()
        box = idle.pop(key, None)
        if box is not None and box.proc.poll() is None:
            return box
        if box is not None:
            self._discard(box)
        while len(idle) >= _IDLE_PER_THREAD:  # other limits' boxes give way (oldest first)
            self._discard(idle.pop(next(iter(idle))))
        return self._start(key)

    def _start(self, key: _Key) -> _Box | RunResult:
        with self._lock:  # boxes of threads that ended died with them: free their leaves
            dead = [b for b in self._boxes if b.proc.poll() is not None]
        for box in dead:
            self._discard(box)
        try:
            leaf = self._cgroups.leaf(key.memory_mb, key.pids) if self._cgroups else None
        except OSError as exc:
            return RunResult(b"", b"", None, 0.0, "sandbox_error", f"cgroup leaf: {exc}")
        argv = list(key.argv) if leaf is None else leaf.wrap(list(key.argv))
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=_BWRAP_ENV,  # nothing of the trainer's environment enters the namespace, not even bwrap's
            )
        except OSError as exc:
            if leaf is not None:
                leaf.remove()
            return RunResult(b"", b"", None, 0.0, "sandbox_error", f"bwrap: {exc}")
        box = _Box(proc, leaf)
        with self._lock:
            self._boxes.add(box)
        return box

    def _discard(self, box: _Box) -> None:
        with contextlib.suppress(OSError):
            os.killpg(box.proc.pid, 9)
        box.proc.wait()
        for pipe in (box.proc.stdin, box.proc.stdout, box.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if box.leaf is not None:
            box.leaf.remove()
        with self._lock:
            self._boxes.discard(box)

    def _request(
        self, box: _Box, request: RunRequest, session: protocol.SessionPhase = ""
    ) -> tuple[RunResult, bool, bool]:
        """(result, the box may serve the next run, the box was alive when the request was sent)."""
        lim = request.limits
        rlimits = {"RLIMIT_AS": lim.memory_mb << 20, "RLIMIT_FSIZE": lim.disk_mb << 20, "RLIMIT_CORE": 0}
        if (
            os.geteuid() != 0 and box.leaf is None
        ):  # NPROC counts the real uid; root is exempt, so it would mislead
            rlimits["RLIMIT_NPROC"] = lim.pids
        payload = protocol.encode(request, kill_all=True, rlimits=rlimits, session=session)
        oom_before = box.leaf.oom_kills() if box.leaf is not None else 0
        started = time.monotonic()
        outcome, out, err = _exchange(
            box.proc, payload.data, started + lim.wall_s + GRACE_S, lim.output_bytes
        )
        wall = time.monotonic() - started
        if outcome == "timeout":
            return RunResult(b"", b"", None, wall, "timeout", "wall clock: namespace killed"), False, True
        if outcome == "overflow":
            return (
                RunResult(b"", b"", None, wall, "output_limit", "output beyond the cap: namespace killed"),
                False,
                True,
            )
        oom = box.leaf is not None and box.leaf.oom_kills() > oom_before
        frame = protocol.decode(out, payload.nonce, wall) if outcome == "frame" else None
        if frame is not None:
            result = frame.result
            if (
                result.stopped_by == "exit"
                and result.exit_code != 0
                and (oom or result.stderr.rstrip().endswith(b"MemoryError"))
            ):
                memory = RunResult(
                    result.stdout,
                    result.stderr,
                    result.exit_code,
                    wall,
                    "memory",
                    "cgroup memory limit" if oom else "RLIMIT_AS hit",
                )
                return memory, False, True
            return result, frame.clean and not oom, True
        _end(box.proc)
        if box.proc.returncode == 125 and box.leaf is not None and not out:
            return (
                RunResult(b"", err[-4096:], None, wall, "sandbox_error", "could not join the cgroup leaf"),
                False,
                True,
            )
        if outcome == "unsent":
            return RunResult(b"", err[-4096:], None, wall, "sandbox_error", "warm sandbox died"), False, False
        if oom:
            return (
                RunResult(b"", err[-4096:], None, wall, "memory", "cgroup memory limit: OOM-killed"),
                False,
                True,
            )
        if box.proc.returncode not in (0, None) and b"bwrap:" in err:
            return RunResult(b"", err[-4096:], None, wall, "sandbox_error", "bubblewrap failed"), False, True
        return protocol.supervisor_lost(wall, err), False, True

    def close(self) -> None:
        """Kill every warm box (and whatever runs in it) and remove its cgroup leaf."""
        self._held.close()
        with self._lock:
            boxes = list(self._boxes)
        for box in boxes:
            self._discard(box)


@dataclass(frozen=True, slots=True)
class _Key:
    """What a warm box was started for: its bubblewrap command line and its cgroup leaf's limits."""

    argv: tuple[str, ...]
    memory_mb: int
    pids: int


@dataclass(eq=False, slots=True)
class _Box:
    """One warm bubblewrap namespace whose supervisor serves runs one after another, in its own cgroup leaf."""

    proc: subprocess.Popen[bytes]
    leaf: Leaf | None


def _exchange(
    proc: subprocess.Popen[bytes], data: bytes, deadline: float, cap: int
) -> tuple[Literal["frame", "eof", "timeout", "overflow", "unsent"], bytes, bytes]:
    """Send one request to the box's supervisor and read its frame (stdout) and its own stderr by the deadline."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(data)
        proc.stdin.flush()
    except OSError:
        return "unsent", b"", _drain(proc.stderr.fileno())
    out, err = bytearray(), bytearray()
    caps = {proc.stdout.fileno(): (out, 2 * cap + 4096), proc.stderr.fileno(): (err, _STDERR_CAP)}
    with selectors.DefaultSelector() as sel:
        for fd in caps:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout", bytes(out), bytes(err)
            for key, _ in sel.select(remaining):
                buf, limit = caps[key.fd]
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    if key.fd == proc.stdout.fileno():
                        return "eof", bytes(out), bytes(err) + _drain(proc.stderr.fileno())
                    continue
                buf += chunk
                if len(buf) > limit:
                    if buf is err:
                        del err[: len(err) - limit]
                        continue
                    return "overflow", b"", bytes(err)
            size = protocol.frame_size(out)
            if size is not None:
                return ("frame" if size == len(out) else "eof"), bytes(out), bytes(err)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Reap a box that sent no valid frame: it is exiting, or (garbage after a frame) it is killed."""
    try:
        proc.wait(1.0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        proc.wait()


def _drain(fd: int) -> bytes:
    """What the supervisor's stderr holds now, without waiting."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, _STDERR_CAP) or b""
    except BlockingIOError:
        return b""
