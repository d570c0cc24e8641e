"""Optional PPO critic: the policy's backbone with a scalar value head, trained on GAE returns.

Value of response token t = V(state before t) = head(hidden at position t - 1), the same positions
the policy scores, so values/returns/advantages all share the batch's [B, T] response layout.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from reasoning_rl import dist
from reasoning_rl.algorithms.aggregation import AggMode, compute_normalizer
from reasoning_rl.algorithms.losses import value_loss
from reasoning_rl.policy.batch import (
    Layout,
    MicroBatch,
    MicroBatching,
    Packing,
    TokenBatch,
    attention_cost,
    pack,
    unflatten,
)
from reasoning_rl.policy.comm import CommMeter, Sharding
from reasoning_rl.policy.policy import lr_lambda
from reasoning_rl.policy.sharded import load_train_state, save_train_state
from reasoning_rl.policy.train_state import clip_and_step, load_trainable, saved_tensors_on_host
from reasoning_rl.policy.wrap import equalize, response_hidden
from reasoning_rl.trace import Progress


class ValueModule(nn.Module):
    """Backbone + linear value head; FSDP2 root (the head shards with the root group)."""

    def __init__(self, lm: Any) -> None:
        super().__init__()
        self.lm: Any = lm
        hidden = lm.config.hidden_size
        self.value_head = nn.Linear(hidden, 1, dtype=next(lm.parameters()).dtype)
        nn.init.normal_(self.value_head.weight, std=1.0 / math.sqrt(hidden + 1))
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: Tensor, gather: Tensor, position_ids: Tensor | None = None) -> Tensor:
        h = response_hidden(self.lm, input_ids, gather, position_ids)
        return self.value_head(h).squeeze(-1).float()


class Critic:
    """Value model for PPO. ``values`` for rollouts, ``train_step`` on (returns, old values)."""

    def __init__(
        self,
        module: ValueModule,
        device: torch.device,
        fsdp: bool,
        *,
        lr: float,
        weight_decay: float,
        betas: tuple[float, float],
        grad_clip: float | None,
        warmup_steps: int,
        total_steps: int | None,
        batching: MicroBatching,
        value_clip: float | None,
        comm: CommMeter | None = None,
        activation_offload: bool = False,
        fused_optimizer: bool = False,
    ) -> None:
        self.module = module
        self.activation_offload = activation_offload
        self.comm = comm
        self.device = device
        self.fsdp = fsdp
        self.grad_clip = grad_clip
        self.batching = batching
        self.value_clip = value_clip
        impl = {"fused": True} if fused_optimizer else {}
        self.optimizer = torch.optim.AdamW(
            module.parameters(), lr=lr, betas=betas, weight_decay=weight_decay, **impl
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(warmup_steps, total_steps)
        )

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        *,
        gguf_file: str | None = None,
        dtype: str = "float32",
        device: str | None = None,
        fsdp: bool | None = None,
        activation_checkpointing: bool = False,
        checkpoint_every: int = 1,
        activation_offload: bool = False,
        fused_optimizer: bool = False,
        compile_layers: bool = False,
        sharding: Sharding = Sharding(),
        lr: float = 1e-5,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        grad_clip: float | None = 1.0,
        warmup_steps: int = 0,
        total_steps: int | None = None,
        micro_batch_tokens: int = 4096,
        packing: Packing = "auto",
        value_clip: float | None = 0.2,
    ) -> Critic:
        batching = MicroBatching(micro_batch_tokens, packing=packing)
        module, where, comm, _ = load_trainable(
            path,
            gguf_file=gguf_file,
            dtype=dtype,
            device=device,
            fsdp=fsdp,
            activation_checkpointing=activation_checkpointing,
            checkpoint_every=checkpoint_every,
            head=ValueModule,
            compile_layers=compile_layers,
            sharding=sharding,
        )
        return cls(
            module,
            where.device,
            where.fsdp,
            lr=lr,
            weight_decay=weight_decay,
            betas=betas,
            grad_clip=grad_clip,
            warmup_steps=warmup_steps,
            total_steps=total_steps,
            batching=replace(batching, cost=attention_cost(module.lm.config)),
            value_clip=value_clip,
            comm=comm,
            activation_offload=activation_offload,
            fused_optimizer=fused_optimizer,
        )

    def _blocks(self, layout: Layout) -> list[list[int] | None]:
        return equalize(layout.blocks) if self.fsdp else list(layout.blocks)

    def values(self, batch: TokenBatch) -> Tensor:
        """Per-response-token values [B, T], no grad."""
        b, t = batch.shape
        out = torch.zeros(b, t)
        layout = self.batching.layout(batch, training=False)
        with torch.no_grad():
            for rows in self._blocks(layout):
                mb = pack(batch, rows if rows is not None else [0], self.device, packed=layout.packed)
                v = self.module(*_inputs(mb))
                if rows is not None:
                    out[rows] = unflatten(v.cpu(), mb.lens, t)
        return out

    def train_step(
        self,
        batch: TokenBatch,
        returns: Tensor,
        old_values: Tensor,
        *,
        agg: AggMode = "token-mean",
        progress: Progress | None = None,
    ) -> dict[str, float]:
        """One optimizer step on the clipped value loss; split-invariant like ``Policy.train_step``, and
        reporting its micro-batches to ``progress`` the same way."""
        b, t = batch.shape
        for name, x in (("returns", returns), ("old_values", old_values)):
            if tuple(x.shape) != (b, t):
                raise ValueError(
                    f"{name} must have the batch's per-token shape [B, T]={(b, t)}; got {tuple(x.shape)}"
                )
        mask = batch.response_mask
        normalizer = float(
            dist.all_reduce_sum(torch.tensor(compute_normalizer(agg, mask, max_response_len=t))).item()
        )
        world = dist.world_size() if self.fsdp else 1
        total = torch.zeros(1)
        layout = self.batching.layout(batch)
        blocks = self._blocks(layout)
        for k, rows in enumerate(blocks, start=1):
            if progress is not None:
                progress(k, len(blocks))
            if rows is None:
                (self.module(*_inputs(pack(batch, [0], self.device))).sum() * 0.0).backward()
                continue
            mb = pack(batch, rows, self.device, packed=layout.packed)
            width = max(mb.lens)
            with saved_tensors_on_host(self.activation_offload, self.device):
                v = unflatten(self.module(*_inputs(mb)), mb.lens, width)
            dev = v.device
            loss = value_loss(
                v,
                old_values[rows, :width].to(dev),
                returns[rows, :width].to(dev),
                mask[rows, :width].to(dev),
                clip=self.value_clip,
                agg=agg,
                normalizer=normalizer,
            )
            (loss * world).backward()
            total += float(loss.detach())
        dist.all_reduce_sum(total)
        grad_norm = clip_and_step(self.module, self.optimizer, self.grad_clip)
        lr = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        return {"value_loss": float(total), "grad_norm": grad_norm, "lr": lr}

    def save_sharded(self, directory: str | Path) -> None:
        """Like ``Policy.save_sharded``: this rank's shards of weights, AdamW state, LR schedule. Collective."""
        save_train_state(Path(directory), self.module, self.optimizer, self.scheduler, {})

    def load_sharded(self, directory: str | Path) -> None:
        """Like ``Policy.load_sharded``: restore, resharded to this run's world size. Collective."""
        load_train_state(Path(directory), self.module, self.optimizer, self.scheduler, {}, what="critic")


def _inputs(mb: MicroBatch) -> tuple[Tensor, Tensor, Tensor | None]:
    return mb.input_ids, mb.gather, mb.position_ids
