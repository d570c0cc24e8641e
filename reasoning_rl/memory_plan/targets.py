"""Machines a run can be planned for without being on one (``rrl train CONFIG --dry-run --plan-for h200x8`` on a
CPU login node): a GPU kind, its memory as torch reports it, its bf16 dense peak, and how many a node has.

Why: the plan needs the device's capacity and the number of ranks sharing the FSDP2 shards; on a machine without
the GPUs both come from this table instead of ``torch.cuda``."""

from __future__ import annotations

from dataclasses import dataclass

from reasoning_rl.config import ConfigError
from reasoning_rl.memory_plan.shapes import GiB


@dataclass(frozen=True)
class Gpu:
    """One GPU kind: ``memory`` is torch's ``total_memory`` (rounded down), ``bf16_flops`` its dense peak."""

    name: str
    memory: int
    bf16_flops: float


@dataclass(frozen=True)
class Target:
    """``count`` GPUs of one kind on each node."""

    name: str
    gpu: Gpu
    count: int

    def describe(self) -> str:
        return (
            f"{self.name}: {self.count} x {self.gpu.name} per node ({self.gpu.memory / GiB:.0f} GiB, "
            f"{self.gpu.bf16_flops / 1e12:.0f} TFLOP/s bf16 dense each)"
        )


GPUS: dict[str, Gpu] = {
    "h200": Gpu("NVIDIA H200", 139 * GiB, 989e12),
    "h100": Gpu("NVIDIA H100 80GB", 79 * GiB, 989e12),
    "a100-80g": Gpu("NVIDIA A100 80GB", 79 * GiB, 312e12),
}
COUNTS = (1, 2, 4, 8)  # GPUs per node; one GPU is the kind's bare name (h200), more are KINDxN (h200x8)

TARGETS: dict[str, Target] = {
    (kind if n == 1 else f"{kind}x{n}"): Target(kind if n == 1 else f"{kind}x{n}", gpu, n)
    for kind, gpu in GPUS.items()
    for n in COUNTS
}


def find_target(name: str) -> Target:
    """The target called ``name``; an unknown one is a ``ConfigError`` naming every known target."""
    try:
        return TARGETS[name.lower()]
    except KeyError:
        raise ConfigError(f"--plan-for {name!r}: unknown target; known: {', '.join(TARGETS)}") from None


def target_engine(engine: str) -> str:
    """The rollout engine ``rollout.engine`` gives on a target's GPUs: ``auto`` is vLLM there (the CUDA install
    has it), whatever this machine has."""
    return "vllm" if engine == "auto" else engine
