"""The Lean launcher this checkout builds (``scripts/services.d/30-lean.sh`` writes ``.cache/lean/bin/lean``)
as the lean grader's toolchain when nothing else names one, so ``examples/lean_prelude`` runs as shipped.

Explicit choices always win: the grader's ``lean``/``project``/``lean_path``/``lean_in_sandbox`` options, the
``RRL_LEAN``/``RRL_LEAN_PROJECT``/``LEAN_PATH`` environment, or a ``lean`` on PATH. ``rrl doctor`` resolves
through the same function, so what it reports is what a run uses.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reasoning_rl.config import Config
from reasoning_rl.config.routing import graders_named

LAUNCHER = Path(".cache") / "lean" / "bin" / "lean"
REPO = Path(__file__).resolve().parents[1]
TOOLCHAIN_OPTIONS = ("lean", "project", "lean_path", "lean_in_sandbox")
TOOLCHAIN_ENV = ("RRL_LEAN", "RRL_LEAN_PROJECT", "LEAN_PATH")


def built_launcher() -> Path | None:
    """``.cache/lean/bin/lean`` under the working directory or this checkout, if built."""
    for root in (Path.cwd(), REPO):
        path = root / LAUNCHER
        if path.is_file() and os.access(path, os.X_OK):
            return path.resolve()
    return None


def with_default_launcher(options: Mapping[str, Any]) -> dict[str, Any]:
    """The lean grader's options, plus ``lean=<built launcher>`` when no toolchain is chosen otherwise."""
    chosen = any(options.get(k) for k in TOOLCHAIN_OPTIONS) or any(os.environ.get(k) for k in TOOLCHAIN_ENV)
    if chosen or shutil.which("lean") is not None:
        return dict(options)
    launcher = built_launcher()
    return {**options, "lean": str(launcher)} if launcher is not None else dict(options)


def default_lean_launcher(cfg: Config) -> None:
    """Fill ``grading.options.lean.lean`` for a config that routes rows to the lean grader (the resolved
    config saved in the run dir then names the launcher used)."""
    if "lean" not in graders_named(cfg.model_dump(mode="json")):
        return
    options = with_default_launcher(cfg.grading.options.get("lean", {}))
    if options != cfg.grading.options.get("lean", {}):
        cfg.grading.options = {**cfg.grading.options, "lean": options}
