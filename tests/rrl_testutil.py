"""Helpers shared by test modules (a uniquely named module: several ``conftest.py`` files exist, so
``from conftest import ...`` would pick whichever was imported first)."""

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
