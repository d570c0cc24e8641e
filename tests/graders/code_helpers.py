"""Shared bits for the code-grader tests: a module-scoped Docker sandbox and response formatting."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sandboxes
from graders.code import CodeGrader
from sandboxes.types import Sandbox


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```\n"


def docker_sandbox(pool_size: int = 3) -> Iterator[Sandbox]:
    ok, why = sandboxes.check("docker")
    if not ok:
        pytest.fail(f"docker sandbox unusable: {why} (run scripts/services.sh)")
    sb = sandboxes.open_sandbox("docker", pool_size=pool_size)
    yield sb
    sb.close()


def grader() -> CodeGrader:
    return CodeGrader()
