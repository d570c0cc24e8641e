"""Shared fixtures. Paths to ../shared are read in place and skipped cleanly when absent."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A file under ../shared, or a visible skip when this checkout has none."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: ../shared is absent in this checkout")
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer Qwen2 + char-level tokenizer, built offline once per session."""
    pytest.importorskip("torch")
    from reasoning_rl.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))
