"""Run untrusted programs with hard limits. Knows nothing about graders.

    sb = open_sandbox()                      # Docker warm pool if Docker works, else local (with a warning)
    result = sb.run(RunRequest(["python3", "main.py"], files={"main.py": src}, stdin=b"1 2\n"))
    sb.close()
"""

from __future__ import annotations

import logging
from typing import Any

from sandboxes.types import Limits, Mount, RunRequest, RunResult, Sandbox, SandboxError, StopReason

log = logging.getLogger(__name__)

BACKENDS = ("auto", "docker", "local")

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
    """A ready sandbox. ``docker`` options: ``image``, ``pool_size`` (default 4), ``warm`` (default True).

    ``auto`` picks Docker when the daemon and image work, otherwise the weaker local backend with a warning.
    Raises ``SandboxError`` (saying how to fix it) when the requested backend is unusable.
    """
    if backend not in BACKENDS:
        raise SandboxError(f"unknown sandbox backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "docker":
        from sandboxes.docker_backend import DockerSandbox

        return DockerSandbox(**options)
    if backend == "local":
        from sandboxes.local_backend import LocalSandbox

        _reject_options("local", options)
        return LocalSandbox()
    try:
        return open_sandbox("docker", **options)
    except SandboxError as exc:
        log.warning("Docker sandbox unavailable (%s); using the local bubblewrap sandbox: WEAKER isolation", exc)
        return open_sandbox("local")


def _reject_options(backend: str, options: dict[str, Any]) -> None:
    if options:
        raise SandboxError(f"the {backend} backend takes no options, got {sorted(options)}")


def check(backend: str = "auto", **options: Any) -> tuple[bool, str]:
    """Whether ``backend`` can run a program right now, and why not (used by ``rrl sandbox check``/doctor)."""
    try:
        sandbox = open_sandbox(backend, **({"warm": False, **options} if backend != "local" else options))
    except SandboxError as exc:
        return False, str(exc)
    try:
        result = sandbox.run(RunRequest(["python3", "-c", "print(6 * 7)"], limits=Limits(wall_s=20)))
    finally:
        sandbox.close()
    if result.ok and result.stdout.strip() == b"42":
        return True, f"{sandbox.name} sandbox works ({sandbox.isolation} isolation, {result.wall_s:.2f} s)"
    return False, (
        f"{sandbox.name} sandbox could not run python3: stopped_by={result.stopped_by} "
        f"exit={result.exit_code} {result.detail} {result.stderr[-500:].decode(errors='replace')}"
    )
