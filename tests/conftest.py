"""Shared fixtures. Paths to ../shared are read in place and skipped cleanly when absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from rrl_testutil import REPO, SHARED, shared_path
from system_programs import missing_program_line

__all__ = ["REPO", "SHARED", "shared_path"]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Stop before running anything when a selected test needs a system program that is not installed."""
    line = missing_program_line(session.items)
    if line is not None:
        pytest.exit(line, returncode=4)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer Qwen2 + char-level tokenizer, built offline once per session."""
    pytest.importorskip("torch")
    from reasoning_rl.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))
