"""Derive what a run needs from its resolved config (``reasoning_rl.config.Config`` dumped to a mapping).

Reads by path with defaults, so a partial mapping (a hand-written dict in a test, an older run's
``config.yaml``) still yields requirements for what it does say.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reasoning_rl.config.routing import dotted_get, graders_named
from reasoning_rl.doctor_checks.base import Requirements

SANDBOXED_GRADERS = ("code", "lean")  # graders that run untrusted programs through `sandboxes`


def requirements_from_config(cfg: Mapping[str, Any]) -> Requirements:
    graders = graders_named(cfg)
    backends = frozenset(
        str((dotted_get(cfg, f"grading.options.{g}") or {}).get("sandbox", "auto")).lower()
        for g in SANDBOXED_GRADERS
        if g in graders
    )
    engine = str(dotted_get(cfg, "rollout.engine", "auto")).lower()
    ray_address = dotted_get(cfg, "grading.ray_address")
    run_dir = dotted_get(cfg, "run.dir")
    model_path = dotted_get(cfg, "model.path")
    cuda = str(dotted_get(cfg, "run.device", "auto")).lower() == "cuda"
    local_procs = os.environ.get("LOCAL_WORLD_SIZE", "")
    return Requirements(
        vllm=engine == "vllm",
        cuda=cuda,
        gpus=int(local_procs) if cuda and local_procs.isdigit() else 0,
        vllm_sleep=dotted_get(cfg, "rollout.sleep") is True and engine in ("vllm", "auto"),
        sandboxes=backends,
        lean="lean" in graders,
        ray=str(dotted_get(cfg, "grading.backend", "auto")).lower() == "ray" or bool(ray_address),
        ray_address=str(ray_address) if ray_address else None,
        vllm_dtype=str(dotted_get(cfg, "model.dtype", "auto")) if engine in ("vllm", "auto") else None,
        output_dir=Path(str(run_dir).format(name=dotted_get(cfg, "run.name", "run"))) if run_dir else None,
        model_dir=Path(model_path) if isinstance(model_path, str) and Path(model_path).is_dir() else None,
        lean_options=dict(dotted_get(cfg, "grading.options.lean") or {}),
        wandb=dotted_get(cfg, "logging.wandb") is True,
        keep_checkpoints=int(dotted_get(cfg, "trainer.keep_checkpoints", 2)),
        device=str(dotted_get(cfg, "run.device", "auto")).lower(),
        resources=dict(dotted_get(cfg, "resources") or {}),
        config=cfg,
        from_config=True,
    )
