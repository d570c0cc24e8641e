"""Shared fixtures. Paths to ../shared are read in place and skipped cleanly when absent."""

from __future__ import annotations

from pathlib import Path

import pytest
from rrl_testutil import REPO, SHARED, shared_path

__all__ = ["REPO", "SHARED", "shared_path"]

@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer Qwen2 + char-level tokenizer, built offline once per session."""
    pytest.importorskip("torch")
    from reasoning_rl.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))
