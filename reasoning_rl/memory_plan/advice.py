"""The one line that tells a run which does not fit what does: the micro-batch budget, or the first memory switch
(each alone, then together) under which its update fits."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from reasoning_rl.config import Config
from reasoning_rl.memory_plan.engine import ENGINE_ASLEEP, SHARE_STEP, EnginePlan
from reasoning_rl.memory_plan.shapes import ModelShape, gib
from reasoning_rl.memory_plan.update import TrainSetup, largest_budget, update_peak

SWITCHES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("model.gradient_checkpointing=true", {"checkpointing": True, "checkpoint_every": 1}),
    ("model.cpu_offload=true", {"cpu_offload": True}),
    ("model.activation_offload=true", {"activation_offload": True}),
)


def advice(shape: ModelShape, s: TrainSetup, usable: int, longest: int, budget: int | None) -> str | None:
    """None when the update fits ``usable`` (with ``budget`` tokens, or at least one ``longest`` sequence);
    else one line naming the budget, or the first of ``SWITCHES`` (each alone, then together) that makes it
    fit."""
    need = max(budget or longest, longest)
    if update_peak(shape, s, need) <= usable:
        return None
    peak = gib(update_peak(shape, s, need))
    largest = largest_budget(shape, s, usable)
    what = f"algorithm.micro_batch_tokens={budget}" if budget else f"one {longest}-token sequence"
    head = f"memory plan: {what} needs {peak} in the update, {gib(usable)} usable on this device"
    if budget and largest >= longest:
        return f"{head}: set algorithm.micro_batch_tokens<={largest} (or leave it unset: the plan picks it)"
    found = fitting_switches(shape, s, usable, longest)
    if found is not None:
        names, tried = found
        fit = largest_budget(shape, tried, usable)
        return f"{head}: set {' '.join(names)} (then micro_batch_tokens up to {fit} fit)"
    every = " ".join(n for n, c in SWITCHES if _changes(s, c)) or "every memory switch"
    return f"{head}, even with {every}: lower rollout.max_tokens or use more GPUs"


def engine_advice(
    cfg: Config, engine: EnginePlan, capacity: int, usable: int, beside: int, update: int
) -> str | None:
    """None when a colocated engine's share fits beside the trainer: its states and hand-off buckets
    (``beside``) during generation and the hand-off, and with ``rollout.sleep=false`` the update's peak without
    the engine (``update``) too. Else one line with the highest ``rollout.gpu_memory_utilization`` that fits,
    or sleep mode. Before: a fixed share of 0.9 passed the dry run and vLLM could not start beside the trainer."""
    r = cfg.rollout
    awake = r.sleep is False
    held = engine.held(capacity)
    need = max(beside, update if awake else 0)
    if need + held <= usable:
        return None
    share = engine.utilization(capacity)
    setting = (
        f"rollout.gpu_memory_utilization={share}"
        if r.gpu_memory_utilization is not None
        else f"its planned {share}"
    )
    when = (
        "in the update (rollout.sleep=false keeps it awake)"
        if need > beside
        else "during generation and the weight hand-off"
    )
    most = math.floor((usable - need) / capacity * SHARE_STEP) / SHARE_STEP
    fixes = []
    if r.gpu_memory_utilization is not None and most * capacity >= engine.least:
        fixes.append(f"set rollout.gpu_memory_utilization<={most:.3f} (or leave it unset: the plan sizes it)")
    if awake and beside + held <= usable and update + ENGINE_ASLEEP <= usable:
        fixes.append("set rollout.sleep=true (vLLM frees its memory for the update)")
    if not fixes:
        fixes.append(
            "free device memory for the engine (model.cpu_offload=true moves the optimizer state to the host)"
        )
    return (
        f"memory plan: vLLM holds {gib(held)} of the device ({setting}) beside the trainer's {gib(need)} {when}, "
        f"{gib(usable)} usable: {' or '.join(fixes)}"
    )


def cpu_advice(shape: ModelShape, s: TrainSetup, usable: int, longest: int, chosen: int) -> str | None:
    """On CPU (the host's memory is the device's): None when the update at ``chosen`` tokens fits ``usable``;
    else one line with the budget or gradient checkpointing that fits (the GPU offload switches do not apply).
    Before: the dry run printed a plan over its own usable memory and then said ok."""
    if update_peak(shape, s, chosen) <= usable:
        return None
    head = (
        f"memory plan: the update at micro_batch_tokens={chosen} needs {gib(update_peak(shape, s, chosen))}, "
        f"{gib(usable)} usable in this machine's memory"
    )
    largest = largest_budget(shape, s, usable)
    if largest >= longest:
        return f"{head}: set algorithm.micro_batch_tokens={largest}"
    if not s.checkpointing:
        tried = replace(s, checkpointing=True, checkpoint_every=1)
        if update_peak(shape, tried, longest) <= usable:
            return f"{head}: set model.gradient_checkpointing=true"
    return f"{head}: lower rollout.max_tokens, use a smaller model or a GPU"


def _changes(s: TrainSetup, change: dict[str, Any]) -> bool:
    return any(getattr(s, k) != v for k, v in change.items())


def fitting_switches(
    shape: ModelShape, s: TrainSetup, usable: int, longest: int
) -> tuple[list[str], TrainSetup] | None:
    """The first of ``SWITCHES`` not yet on (each alone, then together in order) under which one ``longest``
    sequence's update fits ``usable``: their ``key=value`` names and the setup; None if none does."""
    todo = [(name, change) for name, change in SWITCHES if _changes(s, change)]
    for combo in [[c] for c in todo] + [todo[:n] for n in range(2, len(todo) + 1)]:
        tried = replace(s, **{k: v for _, change in combo for k, v in change.items()})
        if update_peak(shape, tried, longest) <= usable:
            return [name for name, _ in combo], tried
    return None
