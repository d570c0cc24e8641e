"""The training ranks' cluster (``resources``): listed when a config asks for more than one rank or a Ray cluster,
and an impossible request (more ranks than devices, more nodes than the cluster has, an unreachable
``resources.ray_address``) refused with the fix, before a placement group would wait for bundles forever."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from reasoning_rl.doctor_checks.base import CheckResult, Requirements, register

if TYPE_CHECKING:
    from reasoning_rl.cluster import ClusterInfo
    from reasoning_rl.config.resources import ResourcesConfig


def _device(requested: str) -> str:
    from reasoning_rl.cluster import local_gpu_count

    if requested in ("cpu", "cuda"):
        return requested
    return "cuda" if local_gpu_count() else "cpu"


@register("cluster", 65)
def check_cluster(req: Requirements) -> list[CheckResult]:
    from reasoning_rl import cluster
    from reasoning_rl.config.resources import ResourcesConfig

    try:
        res = ResourcesConfig.model_validate(req.resources)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        key = f"resources.{where}" if where else "resources"
        return [
            CheckResult("cluster", "problem", f"{key}: {first['msg']}", "fix the resources section", True)
        ]
    device = _device(req.device)
    world = res.nodes * cluster.ranks_per_node(res, device)
    if world <= 1 and res.ray_address is None:
        return [CheckResult("cluster", "ok", "one training rank in this process (no Ray)")]
    try:
        if res.ray_address is None:
            info = cluster.local_cluster(device)
            cluster.validate_request(res, info, device=device)
            detail = f"{world} ranks on a local Ray instance; {info.summary()}"
        else:
            info = _joined(res, world, device)
            cluster.validate_request(res, info, device=device)
            detail = f"{world} ranks on {info.where}; {info.summary()}"
    except cluster.RequestError as exc:
        return [CheckResult("cluster", "problem", exc.problem, exc.fix, required=True)]
    results = [CheckResult("cluster", "ok", detail, required=True)]
    backend = "nccl" if device == "cuda" else "gloo"
    if backend not in info.backends:
        results.append(
            CheckResult(
                "collectives",
                "problem",
                f"{world} {device} ranks need torch.distributed's {backend}, absent here",
                "install a CUDA build of torch (it bundles NCCL)" if backend == "nccl" else "reinstall torch",
                required=True,
            )
        )
    else:
        results.append(CheckResult("collectives", "ok", f"{backend} for {device} ranks", required=True))
    return results


def _joined(res: ResourcesConfig, world: int, device: str) -> ClusterInfo:
    """Join the configured cluster just long enough to list its nodes (probed first: fails in seconds)."""
    import ray

    from reasoning_rl import cluster

    owns = cluster.connect(res, world=world, device=device)
    try:
        return cluster.describe(res.ray_address)
    finally:
        if owns:
            ray.shutdown()
