"""Local fallback for machines without Docker: bubblewrap namespaces (no network, own pid and IPC namespace,
read-only system dirs, tmpfs work dir) plus rlimits, and a cgroup leaf per run for the aggregate memory and
pids limits. WEAKER than Docker: host system dirs are readable. Without a writable cgroup the limits are only
rlimits: per process for memory (forks multiply it) and none for pids as root, so as root it refuses to run
untrusted code unless ``unbounded=True`` is asked for explicitly; otherwise it warns once."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from typing import Literal

from sandboxes import protocol
from sandboxes.cgroup import Cgroups, Leaf
from sandboxes.types import RunRequest, RunResult, SandboxError

log = logging.getLogger(__name__)

GRACE_S = 5.0
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc")
_SANDBOX_UID = 65534
_warned = False


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError("bubblewrap not found: install it (apt-get install -y bubblewrap) or use Docker")
    return path


def _python() -> str:
    for candidate in ("/usr/bin/python3", "/bin/python3"):
        if os.path.exists(candidate):
            return candidate
    raise SandboxError("no system python3 under /usr/bin: the local sandbox only sees system dirs")


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(message)


class LocalSandbox:
    """Each run gets a fresh bubblewrap namespace in its own cgroup leaf; killing bwrap and the leaf kills
    everything inside it."""

    name = "local"
    isolation: Literal["strong", "weak"] = "weak"

    def __init__(self, unbounded: bool = False) -> None:
        self._bwrap = bwrap_path()
        self._python = _python()
        self._cgroups = Cgroups.find()
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
            "--cap-drop",
            "ALL",
            "--clearenv",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ]
        for d in _SYSTEM_DIRS:
            argv += ["--ro-bind-try", d, d]
        size = str(lim.disk_mb << 20)
        argv += ["--size", size, "--tmpfs", protocol.WORKDIR, "--size", size, "--tmpfs", "/tmp"]
        for m in request.mounts:
            argv += ["--ro-bind" if m.read_only else "--bind", m.source, m.target]
        argv += ["--chdir", protocol.WORKDIR]
        return argv + protocol.supervisor_command(self._python)

    def run(self, request: RunRequest) -> RunResult:
        lim = request.limits
        try:
            leaf = self._cgroups.leaf(lim.memory_mb, lim.pids) if self._cgroups else None
        except OSError as exc:
            return RunResult(b"", b"", None, 0.0, "sandbox_error", f"cgroup leaf: {exc}")
        try:
            return self._run(request, leaf)
        finally:
            if leaf is not None:
                leaf.remove()

    def _run(self, request: RunRequest, leaf: Leaf | None) -> RunResult:
        lim = request.limits
        rlimits = {"RLIMIT_AS": lim.memory_mb << 20, "RLIMIT_FSIZE": lim.disk_mb << 20, "RLIMIT_CORE": 0}
        if (
            os.geteuid() != 0 and leaf is None
        ):  # NPROC counts the real uid; root is exempt, so it would mislead
            rlimits["RLIMIT_NPROC"] = lim.pids
        payload = protocol.encode(request, kill_all=True, rlimits=rlimits)
        argv = self._argv(request) if leaf is None else leaf.wrap(self._argv(request))
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return RunResult(b"", b"", None, 0.0, "sandbox_error", f"bwrap: {exc}")
        try:
            out, err = proc.communicate(payload.data, timeout=lim.wall_s + GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            return RunResult(
                b"", b"", None, time.monotonic() - started, "timeout", "wall clock: namespace killed"
            )
        wall = time.monotonic() - started
        if proc.returncode == 125 and leaf is not None and not out:
            return RunResult(b"", err[-4096:], None, wall, "sandbox_error", "could not join the cgroup leaf")
        frame = protocol.decode(out, payload.nonce, wall)
        oom = leaf is not None and leaf.oom_kills() > 0
        if frame is not None:
            result = frame.result
            if (
                result.stopped_by == "exit"
                and result.exit_code != 0
                and (oom or result.stderr.rstrip().endswith(b"MemoryError"))
            ):
                return RunResult(
                    result.stdout,
                    result.stderr,
                    result.exit_code,
                    wall,
                    "memory",
                    "cgroup memory limit" if oom else "RLIMIT_AS hit",
                )
            return result
        if oom:
            return RunResult(b"", err[-4096:], None, wall, "memory", "cgroup memory limit: OOM-killed")
        if proc.returncode not in (0, None) and b"bwrap:" in err:
            return RunResult(b"", err[-4096:], None, wall, "sandbox_error", "bubblewrap failed")
        return protocol.supervisor_lost(wall, err)

    def close(self) -> None:
        """Nothing persists between runs."""
