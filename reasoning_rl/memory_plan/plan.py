"""One training rank's whole plan (``plan_run``): the engine sized first, then the micro-batch budget, each
phase's peak, the host memory of the offloaded states, and the fix when the run cannot fit."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from reasoning_rl.config import Config, ConfigError
from reasoning_rl.memory_plan.advice import advice, cpu_advice, engine_advice
from reasoning_rl.memory_plan.engine import ENGINE_ASLEEP, SHARE_STEP, EnginePlan, handoff_bytes, plan_engine
from reasoning_rl.memory_plan.shapes import GiB, ModelShape, gib
from reasoning_rl.memory_plan.update import (
    TrainSetup,
    host_bytes,
    kept_bytes,
    largest_budget,
    logprob_peak,
    update_peak,
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
    resident: int = 0  # the trainer's states between passes (no gradients): beside generation and hand-off
    buckets: int = 0  # the weight hand-off's transient (handoff_bytes)
    colocated: bool = True  # the engine shares this rank's device (else it has a rollout rank of its own)

    @property
    def update_peak(self) -> int:
        return sum(self.update.values())

    @property
    def beside_engine(self) -> int:
        """The trainer's bytes beside an awake engine at its peak, the weight hand-off: its states and buckets."""
        return self.resident + self.buckets

    @property
    def phases(self) -> dict[str, int]:
        """Each phase's peak of one step: generation (on the engine's device) and the weight hand-off when a
        vLLM engine is planned, the update, the log-prob passes."""
        out: dict[str, int] = {}
        if self.engine is not None:
            held = self.engine.held(self.capacity)
            out["generation"] = held + self.resident * self.colocated
            out["hand-off"] = self.beside_engine + held * self.colocated
        return {**out, "update": self.update_peak, "log-prob passes": self.logprob}

    @property
    def peak(self) -> int:
        """The whole step's peak: its largest phase."""
        return max(self.phases.values())

    @property
    def fits(self) -> bool:
        return self.problem is None

    def lines(self) -> list[str]:
        g = gib
        phases = self.phases
        top = max(phases, key=lambda k: phases[k])
        parts = [f"{k} {g(v)}" for k, v in phases.items()]
        if self.engine is not None:
            held = g(self.engine.held(self.capacity))
            trainer = f"trainer {g(self.resident)} + " if self.colocated else ""
            where = "" if self.colocated else " on its rollout rank"
            parts[0] += f" ({trainer}vLLM's share {held}{where})"
            parts[1] += f" (buckets {g(self.buckets)})"
        terms = ", ".join(f"{k} {g(v)}" for k, v in self.update.items() if v)
        out = [
            f"step peak {g(self.peak)} in the {top}: {', '.join(parts)}; usable {g(self.usable)} of "
            f"{g(self.capacity)}",
            f"update peak {g(self.update_peak)} at micro_batch_tokens={self.micro_batch_tokens} ({terms})",
        ]
        if self.engine is not None:
            e = self.engine
            out.append(
                f"engine {g(e.total)} ({f'{e.cores} cores, each ' if e.cores > 1 else ''}weights {g(e.weights)} "
                f"and vLLM {g(e.overhead)}; KV {g(e.kv)} for max_num_seqs={e.max_num_seqs} of {e.wanted_seqs} "
                f"wanted x max_model_len={e.max_model_len}): gpu_memory_utilization="
                f"{e.utilization(self.capacity):.3f}"
                + (f" ({e.cores} x {e.utilization(self.capacity) / e.cores:.3f})" if e.cores > 1 else "")
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
    colocated = cfg.resources.placement == "colocated"
    shared = cfg.resources.share_gpus  # a split rollout rank's engine on this rank's GPU, in its own process
    own_core = colocated and r.engine_process  # the colocated engine's core in a process of its own
    # the engine processes beside this rank's (shared, or that core; rollout.engine_cores of them): their CUDA
    # contexts
    processes = (shared or own_core) * r.engine_cores
    on_device = colocated or shared  # the engine's share is on this rank's device
    resident = sum(kept_bytes(shape, s, grads=False).values())
    # own_core: each bucket is also copied into the buffer that process maps
    buckets = handoff_bytes(shape, s.handoff_bucket, s.compute_bytes, s.gathered_bytes, 1 + own_core)
    plan: EnginePlan | None = None
    problem = None
    # the engine holds its share through the update too (a shared GPU's engine keeps decoding during it)
    awake = (colocated and r.sleep is False) or shared
    one = update_peak(shape, s, max_model_len)  # the trainer alone, one sequence per micro-batch
    if engine and device == "cuda":
        engines = world if colocated else max(cfg.resources.rollout_ranks // r.tensor_parallel_size, 1)
        fixed = r.gpu_memory_utilization
        # beside the trainer's states and hand-off buckets (awake: its one-sequence update, when that alone fits;
        # else the update's advice names the fix); a planned share rounds up by one SHARE_STEP
        # (plus an engine process's own CUDA context and workspaces)
        beside = max(resident + buckets, one * (awake and one < usable)) * on_device
        beside += DEVICE_RESERVE * processes
        available = usable - beside - (capacity // SHARE_STEP) * (fixed is None)
        if fixed is not None:
            available = min(available, int(fixed * capacity))
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
        if plan is not None and on_device:
            held = plan.held(capacity) if awake else ENGINE_ASLEEP * r.engine_cores  # what each core keeps
            s = replace(s, engine_in_update=held + DEVICE_RESERVE * processes)
    budget = cfg.algorithm.micro_batch_tokens
    largest = largest_budget(shape, s, usable)
    if budget is None:
        chosen = max(largest if device == "cuda" else CPU_MICRO_BATCH_TOKENS, max_model_len)
    else:
        chosen = budget
    host = host_bytes(shape, s) if device == "cuda" else 0
    spec = r.speculative
    drafts = spec.group_max_bytes if engine and spec.method == "group" else 0
    out = MemoryPlan(
        capacity=capacity,
        usable=usable,
        micro_batch_tokens=chosen,
        largest=largest,
        longest=max_model_len,
        update=update_terms(shape, s, chosen),
        logprob=logprob_peak(shape, s, chosen),
        engine=plan,
        host=host,
        drafts=drafts,
        resident=resident,
        buckets=buckets,
        colocated=on_device,
    )
    if problem is None and plan is not None and on_device:  # one sequence: a budget too large is advice's
        problem = engine_advice(cfg, plan, capacity, usable, out.beside_engine, one)
    problem = problem or (
        advice(shape, s, usable, max_model_len, budget)
        if device == "cuda"
        else cpu_advice(shape, s, usable, max_model_len, chosen)
    )
    if problem is None and host_capacity is not None and host + drafts > int(host_capacity * HOST_SHARE):
        problem = (
            f"memory plan: the offloaded states need {gib(host)} of pinned host memory"
            + (f" and the group drafter up to {gib(drafts)}" if drafts else "")
            + f", this host has {gib(host_capacity)}: offload less (model.cpu_offload=false), lower "
            "rollout.speculative.group_max_bytes or use more GPUs"
        )
    return replace(out, problem=problem)
