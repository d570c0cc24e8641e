"""The test-suite guard for system programs: a selected test that needs one that is missing stops the session
with ONE line naming the program and the script that installs it (instead of a failure per test).

What needs what is read off the selection: tests marked ``docker`` need the Docker daemon; tests that use the
local (bubblewrap) sandbox (its fixture, or a module that asks for ``"local"`` sandboxes) need ``bwrap``;
tests marked ``lean`` need ``gcc`` to build the Lean launcher when it is not built yet.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from rrl_testutil import REPO

INSTALLER = "scripts/services.d/10-docker.sh"
# How test code asks for the local sandbox (module source; helpers included).
LOCAL_SANDBOX_USES = ('sandbox="local"', 'open_sandbox("local"', 'check("local")', "local_sandbox")


@dataclass(frozen=True)
class SystemProgram:
    program: str
    package: str  # the Debian package that INSTALLER installs it from
    needed: Callable[[pytest.Item], bool]
    present: Callable[[], bool]


@cache
def _module_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""


def uses_local_sandbox(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "local_sandbox" in getattr(item, "fixturenames", ()) or "local_sandbox" in params.values():
        return True
    return any(use in _module_text(str(item.path)) for use in LOCAL_SANDBOX_USES)


def _on_path(program: str) -> Callable[[], bool]:
    return lambda: shutil.which(program) is not None


def _docker_present() -> bool:
    """dockerd on PATH, or a daemon this machine can reach anyway (socket, DOCKER_HOST)."""
    return bool(
        shutil.which("dockerd") or os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists()
    )


def _lean_buildable() -> bool:
    return (REPO / ".cache/lean/bin/lean").exists() or shutil.which("gcc") is not None


PROGRAMS = (
    SystemProgram("bwrap", "bubblewrap", uses_local_sandbox, _on_path("bwrap")),
    SystemProgram(
        "dockerd", "docker.io", lambda item: item.get_closest_marker("docker") is not None, _docker_present
    ),
    SystemProgram("gcc", "gcc", lambda item: item.get_closest_marker("lean") is not None, _lean_buildable),
)


def missing_program_line(items: Sequence[pytest.Item]) -> str | None:
    """One line naming every missing program that some selected test needs, or None."""
    parts = []
    for req in PROGRAMS:
        needing = [item for item in items if req.needed(item)]
        if needing and not req.present():
            parts.append(
                f"`{req.program}` (Debian package {req.package}; needed by {len(needing)} selected tests, "
                f"e.g. {needing[0].nodeid})"
            )
    if not parts:
        return None
    return (
        f"missing system program {', '.join(parts)}: install with `bash {INSTALLER}` (as root), "
        "or deselect those tests"
    )
