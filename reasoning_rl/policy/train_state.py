"""What the policy and the critic share as trainable FSDP2 modules: the optimizer step and checkpoint state."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def clip_and_step(module: nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float | None) -> float:
    """Clip, then step unless the gradient is non-finite (the step is skipped; the returned norm says why)."""
    norm = torch.nn.utils.clip_grad_norm_(module.parameters(), grad_clip if grad_clip else float("inf"))
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    value = float(norm)
    if math.isfinite(value):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return value


def full_train_state(module: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                     fsdp: bool) -> dict[str, Any]:
    """{"model", "optimizer", "scheduler"} as full CPU state dicts (content on rank 0). Collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=fsdp)
    model_sd, optim_sd = get_state_dict(module, optimizer, options=opts)
    return {"model": model_sd, "optimizer": optim_sd, "scheduler": scheduler.state_dict()}


def load_train_state(module: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, fsdp: bool,
                     state: dict[str, Any], *, what: str, extra_keys: tuple[str, ...] = ()) -> None:
    """Restore ``full_train_state`` output (needed on rank 0 only under FSDP). Collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    missing = {"model", "optimizer", "scheduler", *extra_keys} - set(state)
    if missing:
        raise ValueError(f"{what} checkpoint state lacks {sorted(missing)}")
    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=fsdp)
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                   options=opts)
    scheduler.load_state_dict(state["scheduler"])
