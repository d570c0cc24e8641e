"""What the policy and the critic share as trainable FSDP2 modules: loading and the optimizer step."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn

from reasoning_rl.policy.comm import CommMeter, Sharding
from reasoning_rl.policy.model import load_causal_lm, resolve_dtype
from reasoning_rl.policy.wrap import Placement, placement, wrap

if TYPE_CHECKING:
    from reasoning_rl.config.model import LoraConfig

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
    sharding: Sharding = Sharding(),
    checkpoint_every: int = 1,
    lora: LoraConfig | None = None,
    seed: int = 0,
) -> tuple[M, Placement, CommMeter | None, Any]:
    """Load ``path`` for training (no KV cache), with ``lora``: PEFT adapters injected and the rest frozen,
    put ``head(lm)`` on top, wrap it (FSDP2 when placed so); returns the module, its placement, its FSDP2
    collective meter (None without FSDP) and the ``PeftModel`` (None without adapters).

    With adapters the frozen base is loaded in the compute dtype (it needs no float32 masters: no gradient,
    no optimizer state) and the adapters are kept in float32, initialised from ``seed``."""
    where = placement(device, resolve_dtype(dtype), fsdp)
    adapted = lora is not None and lora.enabled
    lm = load_causal_lm(path, gguf_file=gguf_file, dtype=where.dtype if adapted else where.load_dtype)
    lm.config.use_cache = False
    peft_model = None
    if lora is not None and lora.enabled:
        from reasoning_rl.policy.lora import add_adapters

        peft_model = add_adapters(lm, lora, upcast=True, seed=seed)
    module = head(lm)
    comm = wrap(
        module,
        lm,
        where,
        activation_checkpointing=activation_checkpointing,
        sharding=sharding,
        compile_layers=compile_layers,
        checkpoint_every=checkpoint_every,
    )
    module.train()
    return module, where, comm, peft_model


def saved_tensors_on_host(offload: bool, device: torch.device) -> AbstractContextManager[Any]:
    """Where autograd keeps what a forward saves for backward: with ``offload`` in host memory
    (``torch.autograd.graph.save_on_cpu``, pinned on CUDA; copied back as backward needs each tensor), so a
    micro-batch's activations do not stay on the device (``model.activation_offload``)."""
    if not offload:
        return nullcontext()
    return torch.autograd.graph.save_on_cpu(pin_memory=device.type == "cuda")


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
