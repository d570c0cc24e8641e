"""PEFT LoRA adapters on the trained causal LM (``model.lora``): attaching them, and reading the model back
as the base model's tensors (merged) or as the adapters alone.

PEFT injects its ``LoraLayer``s into the HF model in place (``q_proj`` becomes a layer holding ``base_layer``,
``lora_A.default`` and ``lora_B.default``), so the policy's ``ScoringModule``, FSDP2's per-layer sharding and the
activation checkpointing all keep working on the same HF module tree; only the adapter parameters require
gradients. The ``PeftModel`` wrapper is kept beside it for ``disable_adapter()`` (the KL reference) and for
PEFT's own adapter format.

Merged tensors are computed per tensor, ``W + scaling * B @ A`` in float32 then cast to ``W``'s dtype, into a
new tensor: the trainer's parameters are never modified (PEFT's ``merge_adapter`` would change them in place and
would need an unmerge after every hand-off).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from reasoning_rl.config.model import LoraConfig

ADAPTER = "default"  # PEFT's name of the one adapter the policy trains
BASE_LAYER = ".base_layer."
LORA_MARK = ".lora_"  # in every adapter parameter's name (lora_A, lora_B)


def add_adapters(lm: nn.Module, spec: LoraConfig, *, upcast: bool, seed: int) -> Any:
    """Inject LoRA adapters into ``lm`` (in place) and freeze everything else; returns the ``PeftModel``.

    ``upcast``: keep the adapters in float32 when ``lm`` is in a half dtype (PEFT's ``autocast_adapter_dtype``):
    they are the trained masters, while the frozen base stays in the compute dtype. The random ``A`` matrices
    are drawn from ``seed`` (the caller's RNG is left as it was), so every rank of a sharded run starts from
    the same adapters: FSDP2 keeps each rank's own rows, and different draws would mix into one adapter."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_config = PeftLoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        target_modules=spec.target_modules,
        lora_dropout=spec.dropout,
        bias="none",
    )
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return get_peft_model(lm, peft_config, autocast_adapter_dtype=upcast)
    except ValueError as e:  # PEFT names the module list it could not match
        from reasoning_rl.config import ConfigError

        raise ConfigError(f"model.lora.target_modules={spec.target_modules!r}: {e}") from e


def is_adapter_name(name: str) -> bool:
    return LORA_MARK in name


def base_name(name: str) -> str:
    """The base model's name of a PEFT-wrapped parameter (``...q_proj.base_layer.weight`` -> ``...q_proj.weight``)."""
    return name.replace(BASE_LAYER, ".")


def full(p: Tensor) -> Tensor:
    """The whole tensor of a parameter (an all-gather under FSDP2: collective), detached."""
    return (p.full_tensor() if hasattr(p, "full_tensor") else p).detach()


def lora_layers(lm: nn.Module) -> dict[str, Any]:
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in lm.named_modules() if isinstance(m, LoraLayer)}


def _delta(layer: Any) -> Tensor:
    """``scaling * B @ A`` of one adapted linear layer, float32, in the base weight's layout (collective)."""
    a, b = layer.lora_A[ADAPTER], layer.lora_B[ADAPTER]
    if not isinstance(a, nn.Linear):
        raise ValueError(f"LoRA on {type(layer.base_layer).__name__} layers is not supported (linear only)")
    delta = (full(b.weight).float() @ full(a.weight).float()) * float(layer.scaling[ADAPTER])
    return delta.T if getattr(layer, "fan_in_fan_out", False) else delta


def merged_parameters(lm: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """The base model's parameters under its own names, each adapted weight merged with its adapter into a new
    tensor (the adapter parameters themselves are not yielded). Collective under FSDP2 (every rank must iterate
    to the end, in the same order)."""
    layers = lora_layers(lm)
    for name, p in lm.named_parameters():
        if is_adapter_name(name):
            continue
        tensor = full(p)
        owner, sep, leaf = name.rpartition(BASE_LAYER)
        if sep and leaf == "weight":
            tensor = (tensor.float() + _delta(layers[owner])).to(tensor.dtype)
        yield base_name(name), tensor


def adapter_parameters(lm: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """The adapter tensors alone, under the HF module tree's names (``...q_proj.lora_A.default.weight``).
    Collective under FSDP2."""
    for name, p in lm.named_parameters():
        if is_adapter_name(name):
            yield name, full(p)


def adapter_update_norm(lm: nn.Module) -> float:
    """Frobenius norm of the whole update the adapters make to the base weights, sqrt(sum ||s B A||^2), from
    r x r products (||BA||^2 = tr(B^T B A A^T)): 0 at the start (B = 0). Collective under FSDP2."""
    total = 0.0
    for layer in lora_layers(lm).values():
        a = full(layer.lora_A[ADAPTER].weight).float()
        b = full(layer.lora_B[ADAPTER].weight).float()
        s = float(layer.scaling[ADAPTER])
        total += s * s * float(torch.trace((b.T @ b) @ (a @ a.T)).clamp_min(0.0))
    return math.sqrt(total)


def peft_state_name(name: str) -> str:
    """A module-tree adapter name as PEFT's adapter files key it (``base_model.model.`` + name, without the
    adapter's own name): what ``PeftModel.from_pretrained`` and vLLM's LoRA loader read."""
    return "base_model.model." + name.replace(f".{ADAPTER}.", ".")
