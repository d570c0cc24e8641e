"""CUDA devices, NCCL and torch.distributed backends, and device settings known to break runs."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from reasoning_rl.doctor_checks.base import (
    CheckResult,
    Requirements,
    Status,
    gib,
    installed_version,
    register,
    simulated_missing,
)

CUDA_FIX = (
    "install a CUDA build of torch (bash scripts/install.sh on a GPU machine) and check `nvidia-smi`; "
    "or set the device to cpu/auto in the config"
)


def _torch() -> Any | None:
    if installed_version("torch") is None:
        return None
    import torch

    return torch


def cuda_devices() -> list[tuple[str, int]]:
    """(name, total memory in bytes) per visible CUDA device; empty without torch or CUDA."""
    torch = _torch()
    if torch is None or simulated_missing("cuda") or not torch.cuda.is_available():
        return []
    devices = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        devices.append((props.name, int(props.total_memory)))
    return devices


def cpu_has_bf16() -> bool:
    """Whether the CPU has native bf16 kernels (AVX512-BF16/AMX on x86, BF16 on Arm), as vLLM's CPU backend needs."""
    if simulated_missing("cpu_bf16"):
        return False
    torch = _torch()
    probe = getattr(getattr(torch, "cpu", None), "_is_avx512_bf16_supported", None) if torch else None
    if probe is not None and probe():
        return True
    cpuinfo = Path("/proc/cpuinfo")
    flags = set(cpuinfo.read_text(errors="replace").split()) if cpuinfo.exists() else set()
    return bool({"avx512_bf16", "amx_bf16"} & flags) or (platform.machine() == "aarch64" and "bf16" in flags)


@register("cuda", 30)
def check_cuda(req: Requirements) -> list[CheckResult]:
    torch = _torch()
    if torch is None:
        return [
            CheckResult(
                "CUDA", "problem" if req.cuda else "warn", "torch not installed", CUDA_FIX, required=req.cuda
            )
        ]
    devices = cuda_devices()
    if not devices:
        build = torch.version.cuda or "CPU-only build"
        status: Status = "problem" if req.cuda else "ok"
        detail = f"not available (torch {torch.__version__}, {build}); runs use the CPU"
        return [CheckResult("CUDA", status, detail, CUDA_FIX if req.cuda else "", required=req.cuda)]
    results = [
        CheckResult("CUDA", "ok", f"CUDA {torch.version.cuda}, {len(devices)} device(s)", required=req.cuda)
    ]
    for i, (name, mem) in enumerate(devices):
        results.append(CheckResult(f"cuda:{i}", "ok", f"{name}, {gib(mem)}"))
    if req.gpus > len(devices):
        results.append(
            CheckResult(
                "GPU count",
                "problem",
                f"{req.gpus} processes on this node (LOCAL_WORLD_SIZE), {len(devices)} GPUs visible",
                "start fewer processes (torchrun --nproc_per_node) or check CUDA_VISIBLE_DEVICES",
                required=True,
            )
        )
    return results


@register("distributed", 40)
def check_distributed(req: Requirements) -> list[CheckResult]:
    torch = _torch()
    if torch is None or not torch.distributed.is_available():
        return [CheckResult("torch.distributed", "warn", "unavailable in this torch build", CUDA_FIX)]
    dist = torch.distributed
    nccl = dist.is_nccl_available() and not simulated_missing("nccl")
    backends = [
        name
        for name, ok in (("gloo", dist.is_gloo_available()), ("nccl", nccl), ("mpi", dist.is_mpi_available()))
        if ok
    ]
    results = [CheckResult("torch.distributed", "ok", "backends: " + (", ".join(backends) or "none"))]
    needs_nccl = req.cuda and req.gpus > 1
    if nccl:
        ver = torch.cuda.nccl.version() if torch.cuda.is_available() else None
        shown = ".".join(map(str, ver)) if isinstance(ver, tuple) else str(ver or "bundled")
        results.append(CheckResult("NCCL", "ok", shown, required=needs_nccl))
    else:
        results.append(
            CheckResult(
                "NCCL",
                "problem" if needs_nccl else "ok",
                "not available" + ("" if needs_nccl else " (gloo is used on CPU)"),
                "install a CUDA build of torch (it bundles NCCL)" if needs_nccl else "",
                required=needs_nccl,
            )
        )
    return results


@register("settings", 100)
def check_settings(req: Requirements) -> list[CheckResult]:
    """Settings that crash or crawl here even though each is valid on its own."""
    on_cpu = not req.cuda and not cuda_devices()
    bf16 = cpu_has_bf16()
    dtype = (
        req.vllm_dtype or ""
    ).lower()  # "auto" resolves to float32 on CPU, so only an explicit bf16 breaks
    results = []
    if on_cpu and dtype in ("bfloat16", "bf16") and not bf16:
        results.append(
            CheckResult(
                "vLLM dtype",
                "problem",
                "bfloat16 on a CPU without bf16 kernels: vLLM's CPU backend fails or crawls",
                "set model.dtype: float32 (or auto, which is float32 on CPU)",
                required=True,
            )
        )
    else:
        results.append(
            CheckResult("CPU bf16 kernels", "ok", "available" if bf16 else "absent (use float32 on CPU)")
        )
    return results
