"""The import contracts of ``pyproject.toml`` (``[tool.importlinter]``, run by ``make lint``) hold on this tree
and catch a back-import: each case copies the packages' sources to a temporary directory, adds one import that
runs against the layering (a package layer, a ``reasoning_rl`` layer, a circle between sibling modules, a
function-level import, torch in a grader, a grader module named directly, two independent parts) and expects ``lint-imports`` with the project's contract file to fail
there, naming the contract; the unmodified copy passes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sandboxes", "graders", "reasoning_rl", "bench")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy(dest: Path) -> Path:
    """The packages' Python sources and the contract file, nothing else (no caches, data or run output)."""

    def skip(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if not (Path(folder, n).is_dir() or n.endswith(".py"))] + [
            n for n in names if n in ("__pycache__", "out")
        ]

    for package in PACKAGES:
        shutil.copytree(ROOT / package, dest / package, ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the copy's packages, not the installed checkout's
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _append(path: Path, code: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + "\n\n" + code + "\n", encoding="utf-8")


def test_contracts_hold_on_the_tree(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "code", "contract"),
    [
        # the package layers: sandboxes know nothing of graders
        ("sandboxes/__init__.py", "import graders", "packages: bench > reasoning_rl > graders > sandboxes"),
        # reasoning_rl's layers: the config (bottom) reaching the trainer (top)
        ("reasoning_rl/config/base.py", "import reasoning_rl.trainer.loop", "reasoning_rl's layers"),
        # a distributed worker building from the trainer again (the circle issue 29 removed), lazily
        (
            "reasoning_rl/distributed/worker.py",
            "def _build_again() -> None:\n    from reasoning_rl.trainer.build import build_components",
            "reasoning_rl's layers",
        ),
        # two siblings of one package importing each other (the layers contract does not see inside trainer/)
        ("reasoning_rl/trainer/producers.py", "import reasoning_rl.trainer.frontier", "no import circle"),
        ("reasoning_rl/rollout/base.py", "import reasoning_rl.rollout.multiturn", "no import circle"),
        # graders run without torch
        ("graders/types.py", "import torch", "graders know nothing of torch"),
        # the trainer naming a grader module instead of going through the runtime
        ("reasoning_rl/trainer/eval.py", "import graders.math", "reaches the graders by name"),
        # two parts of one layer that must not know each other
        ("reasoning_rl/data/schema.py", "import reasoning_rl.algorithms", "know nothing of each other"),
    ],
)
def test_a_back_import_breaks_a_contract(tmp_path: Path, module: str, code: str, contract: str) -> None:
    tree = _copy(tmp_path)
    _append(tree / module, code)
    result = _lint(tree)
    assert result.returncode != 0, result.stdout
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout
