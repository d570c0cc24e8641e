"""Run untrusted programs with hard limits. Knows nothing about graders.

sb = open_sandbox()                      # Docker warm pool if Docker works, else local (warns once)
result = sb.run(RunRequest(["python3", "main.py"], files={"main.py": src}, stdin=b"1 2\n"))
sb.close()
"""

from __future__ import annotations

import logging
from typing import Any

from sandboxes.types import Limits, Mount, RunRequest, RunResult, Sandbox, SandboxError, StopReason

log = logging.getLogger(__name__)

BACKENDS = ("auto", "docker", "local")
_LOCAL_OPTIONS = {"unbounded", "image", "max_sessions"}
_SHARED_OPTIONS = {"image"}  # what ``auto`` passes on when it falls back to the local backend
_fallback_warned = False

__all__ = [
    "BACKENDS",
    "Limits",
    "Mount",
    "RunRequest",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "StopReason",
    "check",
    "open_sandbox",
]


def open_sandbox(backend: str = "auto", **options: Any) -> Sandbox:
    """A ready sandbox. ``docker`` options: ``image``, ``pool_size`` (default 4), ``warm`` (default True);
    ``local`` options: ``unbounded`` (default False: as root without a writable cgroup it refuses to start),
    ``image`` (default None: the host's system dirs; a tag: that image's root fs), ``max_sessions`` (default 8).

    ``auto`` picks Docker when the daemon and image work, otherwise the weaker local backend: the first such
    fallback in a process is a WARNING (and ``rrl sandbox check`` says so), later ones are logged at INFO.
    Raises ``SandboxError`` (saying how to fix it) when the requested backend is unusable.
    """
    if backend not in BACKENDS:
        raise SandboxError(f"unknown sandbox backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "docker":
        from sandboxes.docker_backend import DockerSandbox

        return DockerSandbox(**options)
    if backend == "local":
        from sandboxes.local_backend import LocalSandbox

        unknown = sorted(set(options) - _LOCAL_OPTIONS)
        if unknown:
            raise SandboxError(
                f"the local backend takes only the options {sorted(_LOCAL_OPTIONS)}, got {unknown}"
            )
        return LocalSandbox(**options)
    try:
        return open_sandbox("docker", **options)
    except SandboxError as exc:
        global _fallback_warned
        level = logging.INFO if _fallback_warned else logging.WARNING
        _fallback_warned = True
        log.log(
            level,
            "Docker sandbox unavailable (%s); using the local bubblewrap sandbox: WEAKER isolation",
            exc,
        )
        return open_sandbox("local", **{k: v for k, v in options.items() if k in _SHARED_OPTIONS})


def check(backend: str = "auto", **options: Any) -> tuple[bool, str]:
    """Whether ``backend`` can run a program right now, and why not (used by ``rrl sandbox check``/doctor).
    For ``auto`` the message says when (and why) it would fall back to the weaker local backend."""
    if backend == "auto":
        ok, why = check("docker", **options)
        if ok:
            return ok, why
        ok, message = check("local")
        return ok, f"{message}; WARNING: `auto` falls back to it because Docker is unusable ({why})"
    try:
        sandbox = open_sandbox(backend, **({"warm": False, **options} if backend != "local" else options))
    except SandboxError as exc:
        return False, str(exc)
    try:
        result = sandbox.run(RunRequest(["python3", "-c", "print(6 * 7)"], limits=Limits(wall_s=20)))
    finally:
        sandbox.close()
    if result.ok and result.stdout.strip() == b"42":
        note = getattr(sandbox, "limits_note", "")
        return (
            True,
            f"{sandbox.name} sandbox works ({sandbox.isolation} isolation{', ' + note if note else ''}, "
            f"{result.wall_s:.2f} s)",
        )
    return False, (
        f"{sandbox.name} sandbox could not run python3: stopped_by={result.stopped_by} "
        f"exit={result.exit_code} {result.detail} {result.stderr[-500:].decode(errors='replace')}"
    )
