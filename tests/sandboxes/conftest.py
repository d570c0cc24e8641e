"""Sandbox fixtures: one warm Docker pool per session (containers are the slow part)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sandboxes
from sandboxes.types import Sandbox


@pytest.fixture(scope="session")
def docker_sandbox() -> Iterator[Sandbox]:
    ok, why = sandboxes.check("docker")
    if not ok:
        pytest.fail(f"docker sandbox unusable: {why} (run scripts/services.sh)")
    sb = sandboxes.open_sandbox("docker", pool_size=2)
    yield sb
    sb.close()


@pytest.fixture(scope="session")
def local_sandbox() -> Iterator[Sandbox]:
    sb = sandboxes.open_sandbox("local")
    yield sb
    sb.close()
