"""Frozen reference policy for the KL term: a copy of the initial weights (optionally kept in CPU memory
between uses), or for a LoRA run the policy's own base weights with its adapters disabled."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from reasoning_rl.policy.batch import MicroBatching, Packing, TokenBatch, attention_cost
from reasoning_rl.policy.comm import CommMeter, Sharding
from reasoning_rl.policy.model import load_causal_lm, resolve_dtype
from reasoning_rl.policy.wrap import ScoringModule, placement, score, wrap

if TYPE_CHECKING:
    from reasoning_rl.policy.policy import Policy


class ReferencePolicy:
    """Scores sequences under the initial weights. ``offload=True`` keeps parameters in CPU memory
    (FSDP2 ``CPUOffloadPolicy`` when sharded; otherwise moved to the device only while scoring)."""

    def __init__(
        self,
        module: ScoringModule,
        device: torch.device,
        fsdp: bool,
        offload: bool,
        batching: MicroBatching,
        comm: CommMeter | None = None,
    ) -> None:
        self.module = module
        self.comm = comm
        self.device = device
        self.fsdp = fsdp
        self.offload = offload
        self.batching = batching

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        *,
        gguf_file: str | None = None,
        dtype: str = "float32",
        device: str | None = None,
        fsdp: bool | None = None,
        offload: bool = False,
        micro_batch_tokens: int = 4096,
        packing: Packing = "auto",
        chunk_tokens: int = 1024,
    ) -> ReferencePolicy:
        batching = MicroBatching(micro_batch_tokens, packing=packing)
        where = placement(device, resolve_dtype(dtype), fsdp)
        lm = load_causal_lm(path, gguf_file=gguf_file, dtype=where.dtype)
        lm.requires_grad_(False)
        module = ScoringModule(lm, chunk_tokens=chunk_tokens)
        comm = None
        if where.fsdp:
            comm = wrap(module, lm, where, sharding=Sharding(cpu_offload=offload))
        elif not offload:
            module.to(where.device)
        module.eval()
        batching = replace(batching, cost=attention_cost(lm.config))
        return cls(module, where.device, where.fsdp, offload, batching, comm)

    def logprobs(self, batch: TokenBatch) -> Tensor:
        """Per-response-token log-probs [B, T] under the frozen weights."""
        if self.offload and not self.fsdp and self.device.type != "cpu":
            self.module.to(self.device)
            try:
                return score(self.module, batch, self.device, self.batching)[0]
            finally:
                self.module.to("cpu")
        return score(self.module, batch, self.device, self.batching)[0]


class AdapterOffReference:
    """The reference of a LoRA run: the policy's frozen base, scored with the adapters disabled for the pass
    (``Policy.base_logprobs``), so the initial weights are held once, not twice."""

    comm: CommMeter | None = None  # the policy's meter counts the collectives of its passes

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def logprobs(self, batch: TokenBatch) -> Tensor:
        """Per-response-token log-probs [B, T] under the base weights (collective under FSDP2)."""
        return self.policy.base_logprobs(batch)
