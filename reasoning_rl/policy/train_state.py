"""What the policy and the critic share as trainable FSDP2 modules: loading and the optimizer step."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from reasoning_rl.policy.model import load_causal_lm, resolve_dtype
from reasoning_rl.policy.wrap import Placement, placement, wrap

M = TypeVar("M", bound=nn.Module)


def load_trainable(
    path: str,
    *,
    gguf_file: str | None,
    dtype: str,
    device: str | None,
    fsdp: bool | None,
    activation_checkpointing: bool,
    head: Callable[[Any], M],
    compile_layers: bool = False,
) -> tuple[M, Placement]:
    """Load ``path`` for training (no KV cache), put ``head(lm)`` on top, wrap it (FSDP2 when placed so)."""
    where = placement(device, resolve_dtype(dtype), fsdp)
    lm = load_causal_lm(path, gguf_file=gguf_file, dtype=where.load_dtype)
    lm.config.use_cache = False
    module = head(lm)
    wrap(module, lm, where, activation_checkpointing=activation_checkpointing, compile_layers=compile_layers)
    module.train()
    return module, where


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
