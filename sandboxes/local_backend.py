"""Local fallback for machines without Docker: bubblewrap namespaces (no network, own pid namespace, read-only
system dirs, tmpfs work dir) plus rlimits. WEAKER than Docker: no cgroup memory/pid accounting (a fork bomb is
bounded only by the wall clock when running as root), host system dirs are readable."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Literal

from sandboxes import protocol
from sandboxes.types import RunRequest, RunResult, SandboxError

GRACE_S = 5.0
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc")
_SANDBOX_UID = 65534


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


class LocalSandbox:
    """Each run gets a fresh bubblewrap namespace; killing bwrap kills everything inside it."""

    name = "local"
    isolation: Literal["strong", "weak"] = "weak"

    def __init__(self) -> None:
        self._bwrap = bwrap_path()
        self._python = _python()

    def _argv(self, request: RunRequest) -> list[str]:
        lim = request.limits
        argv = [self._bwrap, "--unshare-all", "--unshare-user", "--uid", str(_SANDBOX_UID),
                "--gid", str(_SANDBOX_UID), "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                "--clearenv", "--proc", "/proc", "--dev", "/dev"]
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
        rlimits = {"RLIMIT_AS": lim.memory_mb << 20, "RLIMIT_FSIZE": lim.disk_mb << 20, "RLIMIT_CORE": 0}
        if os.geteuid() != 0:  # NPROC counts the real uid; root is exempt, so it would only mislead
            rlimits["RLIMIT_NPROC"] = lim.pids
        payload = protocol.encode(request, kill_all=True, rlimits=rlimits)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(self._argv(request), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return RunResult(b"", b"", None, 0.0, "sandbox_error", f"bwrap: {exc}")
        try:
            out, err = proc.communicate(payload.data, timeout=lim.wall_s + GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            return RunResult(b"", b"", None, time.monotonic() - started, "timeout", "wall clock: namespace killed")
        wall = time.monotonic() - started
        frame = protocol.decode(out, payload.nonce, wall)
        if frame is not None:
            result = frame.result
            if result.stopped_by == "exit" and result.exit_code != 0 and result.stderr.rstrip().endswith(b"MemoryError"):
                return RunResult(result.stdout, result.stderr, result.exit_code, wall, "memory", "RLIMIT_AS hit")
            return result
        if proc.returncode not in (0, None) and b"bwrap:" in err:
            return RunResult(b"", err[-4096:], None, wall, "sandbox_error", "bubblewrap failed")
        return protocol.supervisor_lost(wall, err)

    def close(self) -> None:
        """Nothing persists between runs."""
