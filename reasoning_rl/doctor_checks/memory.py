"""The memory plan of a config on this machine's device, or on a target's (``reasoning_rl.memory_plan``): a line
per phase, and a required problem naming the switch or budget that fixes it when the run cannot fit (``rrl doctor
CONFIG``, and the pre-flight of ``rrl train``, which then stops before loading anything)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from reasoning_rl.doctor_checks.base import CheckResult, Requirements, register

if TYPE_CHECKING:
    from reasoning_rl.config import Config
    from reasoning_rl.memory_plan.plan import MemoryPlan
    from reasoning_rl.memory_plan.targets import Target


def config_plan(cfg: Config, longest: int | None = None, target: Target | None = None) -> MemoryPlan:
    """The plan of a training rank of ``cfg`` on this machine, or on ``target``'s GPUs (``--plan-for``: its
    memory and GPU count instead of this machine's; host memory not checked), for sequences of ``longest``
    tokens (default: ``data.max_prompt_tokens`` + the response limit). Raises ``PlanUnavailable`` (why) or
    ``ValueError`` (no CUDA for run.device=cuda)."""
    from reasoning_rl.cluster import ranks_per_node
    from reasoning_rl.factory import plan_config, resolve_device, run_dtype
    from reasoning_rl.memory_plan.plan import plan_run
    from reasoning_rl.memory_plan.shapes import ModelShape, PlanUnavailable
    from reasoning_rl.memory_plan.targets import target_engine

    if cfg.model.gguf_file is not None:
        raise PlanUnavailable("a GGUF checkpoint (planned from its converted HF dir in the run)")
    device = "cuda" if target is not None else resolve_device(cfg.run.device)
    res = cfg.resources
    per_node = ranks_per_node(res, device, None if target is None else target.count)
    world = max(res.training_ranks(res.nodes * per_node), 1)
    need = longest or cfg.data.max_prompt_tokens + max(cfg.rollout.max_tokens, cfg.eval.max_tokens or 0)
    dtype = run_dtype(cfg, device)
    if target is None:
        return plan_config(cfg, Path(cfg.model.path), device, dtype, need, world)
    return plan_run(
        cfg,
        ModelShape.from_model_dir(cfg.model.path),
        device=device,
        dtype=dtype,
        capacity=target.gpu.memory,
        world=world,
        max_model_len=need,
        engine=target_engine(cfg.rollout.engine) == "vllm",
    )


@register("memory", 110)
def check_memory(req: Requirements) -> list[CheckResult]:
    from reasoning_rl.config import Config
    from reasoning_rl.memory_plan.shapes import PlanUnavailable

    if req.config is None:
        return []
    try:
        cfg = Config.model_validate(req.config)
    except ValidationError:  # a partial mapping: nothing to plan
        return []
    try:
        plan = config_plan(cfg)
    except (PlanUnavailable, ValueError) as exc:
        return [CheckResult("memory plan", "ok", f"not made: {exc}")]
    results = [CheckResult("memory plan", "ok", line) for line in plan.lines() if line != plan.problem]
    if plan.problem is not None:
        detail, _, fix = plan.problem.rpartition(": ")
        detail = detail.removeprefix("memory plan: ")
        results.append(CheckResult("memory plan", "problem", detail, fix, required=True))
    return results
