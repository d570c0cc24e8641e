"""One training rank's whole plan (``plan_run``): the engine sized first, then the micro-batch budget, each
phase's peak, the host memory of the offloaded states, and the fix when the run cannot fit."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from reasoning_rl.config import Config, ConfigError
from reasoning_rl.memory_plan.advice import advice, cpu_advice
from reasoning_rl.memory_plan.engine import ENGINE_ASLEEP, EnginePlan, plan_engine
from reasoning_rl.memory_plan.shapes import GiB, ModelShape, gib
from reasoning_rl.memory_plan.update import (
    TrainSetup,
    host_bytes,
    kept_bytes,
    largest_budget,
    logprob_peak,
    update_terms,
)

HOST_SHARE = 0.85  # of the host's memory the pinned offloaded states may take (the run needs the rest)
USABLE_SHARE = 0.92  # of the device's memory: the caching allocator's fragmentation and reserve
DEVICE_RESERVE = 1 * GiB  # CUDA context, cuBLAS / NCCL workspaces: memory outside torch's allocator
CPU_MICRO_BATCH_TOKENS = 8192  # algorithm.micro_batch_tokens=None on CPU: the former fixed default


@dataclass(frozen=True)
class MemoryPlan:
    """The plan of one rank: its device's capacity, the chosen micro-batch budget and each phase's peak."""

    capacity: int
    usable: int
    micro_batch_tokens: int
    largest: int  # the largest micro-batch token budget whose update fits usable (0: not even BUDGET_STEP)
    longest: int
    update: dict[str, int]
    logprob: int
    engine: EnginePlan | None
    problem: str | None = None  # one line naming the switch or budget that makes the run fit
    host: int = 0  # pinned host memory the offload switches take (model.cpu_offload, model.ref_offload)
    drafts: int = 0  # host memory of the rank's group drafter index (rollout.speculative.group_max_bytes)

    @property
    def update_peak(self) -> int:
        return sum(self.update.values())

    @property
    def fits(self) -> bool:
        return self.problem is None

    def lines(self) -> list[str]:
        g = gib
        terms = ", ".join(f"{k} {g(v)}" for k, v in self.update.items() if v)
        out = [
            f"update peak {g(self.update_peak)} at micro_batch_tokens={self.micro_batch_tokens} ({terms}); "
            f"log-prob passes {g(self.logprob)}; usable {g(self.usable)} of {g(self.capacity)}"
        ]
        if self.engine is not None:
            e = self.engine
            out.append(
                f"engine {g(e.total)} (weights {g(e.weights)}, KV {g(e.kv)} for max_num_seqs={e.max_num_seqs} "
                f"of {e.wanted_seqs} wanted x max_model_len={e.max_model_len}, vLLM {g(e.overhead)}): "
                f"gpu_memory_utilization={e.utilization(self.capacity):.3f}"
            )
        if self.host:
            out.append(f"host memory for the offloaded states {g(self.host)}")
        if self.drafts:
            out.append(f"host memory for the group drafter's samples {g(self.drafts)} at most")
        if self.problem:
            out.append(self.problem)
        return out


def usable_bytes(capacity: int) -> int:
    return int(capacity * USABLE_SHARE) - DEVICE_RESERVE


def plan_run(
    cfg: Config,
    shape: ModelShape,
    *,
    device: str,
    dtype: str,
    capacity: int,
    world: int,
    max_model_len: int,
    engine: bool,
    host_capacity: int | None = None,
) -> MemoryPlan:
    """The plan of one training rank of ``cfg`` on a device of ``capacity`` bytes (``world`` training ranks;
    ``engine``: a vLLM engine on CUDA, sized here, colocated or on a rollout rank of its own). The micro-batch
    budget is ``algorithm.micro_batch_tokens``, or (None) the largest that fits (``CPU_MICRO_BATCH_TOKENS`` on
    CPU). A config that cannot fit (the device, or ``host_capacity`` bytes of host memory for the offloaded
    states) gets ``problem``: one line with the fix."""
    s = TrainSetup.of(cfg, device=device, dtype=dtype, world=world)
    usable = usable_bytes(capacity)
    r = cfg.rollout
    plan: EnginePlan | None = None
    problem = None
    if engine and device == "cuda":
        colocated = cfg.resources.placement == "colocated"
        engines = world if colocated else max(cfg.resources.rollout_ranks // r.tensor_parallel_size, 1)
        resident = sum(kept_bytes(shape, s, grads=False).values()) if colocated else 0
        available = usable - resident
        if r.gpu_memory_utilization is not None:
            available = min(available, int(r.gpu_memory_utilization * capacity))
        try:
            plan = plan_engine(
                shape,
                cfg,
                dtype=dtype,
                available=available,
                max_model_len=max_model_len,
                wanted_seqs=math.ceil(cfg.trainer.batch_size / engines) * r.n,
            )
        except ConfigError as exc:
            problem = str(exc)
        if plan is not None and colocated:
            asleep = r.sleep is not False
            held = int(plan.utilization(capacity) * capacity)
            s = replace(s, engine_in_update=ENGINE_ASLEEP if asleep else held)
    budget = cfg.algorithm.micro_batch_tokens
    largest = largest_budget(shape, s, usable)
    if budget is None:
        chosen = max(largest if device == "cuda" else CPU_MICRO_BATCH_TOKENS, max_model_len)
    else:
        chosen = budget
    problem = problem or (
        advice(shape, s, usable, max_model_len, budget)
        if device == "cuda"
        else cpu_advice(shape, s, usable, max_model_len, chosen)
    )
    host = host_bytes(shape, s) if device == "cuda" else 0
    spec = r.speculative
    drafts = spec.group_max_bytes if engine and spec.method == "group" else 0
    if problem is None and host_capacity is not None and host + drafts > int(host_capacity * HOST_SHARE):
        problem = (
            f"memory plan: the offloaded states need {gib(host)} of pinned host memory"
            + (f" and the group drafter up to {gib(drafts)}" if drafts else "")
            + f", this host has {gib(host_capacity)}: offload less (model.cpu_offload=false), lower "
            "rollout.speculative.group_max_bytes or use more GPUs"
        )
    return MemoryPlan(
        capacity=capacity,
        usable=usable,
        micro_batch_tokens=chosen,
        largest=largest,
        longest=max_model_len,
        update=update_terms(shape, s, chosen),
        logprob=logprob_peak(shape, s, chosen),
        engine=plan,
        problem=problem,
        host=host,
        drafts=drafts,
    )
