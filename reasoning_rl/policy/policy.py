"""The trainable policy: HF causal LM under FSDP2 with AdamW, grad clipping and an LR schedule.

``train_step`` is one optimizer step over the mini-batch it is given (this rank's share under data
parallelism). Loss normalisers are summed over ranks first, and gradients are summed (not averaged)
across ranks, so the update does not depend on micro-batching or on the number of ranks.

Checkpoints are sharded (``save_sharded`` / ``load_sharded``: torch.distributed.checkpoint, every rank writes its
own shards; loading reshards to any world size). ``save_pretrained`` gathers full weights for an HF export.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from reasoning_rl import dist
from reasoning_rl.algorithms.aggregation import compute_normalizer
from reasoning_rl.algorithms.losses import LossConfig, policy_loss
from reasoning_rl.policy.batch import MicroBatching, Packing, TokenBatch, attention_cost, pack, unflatten
from reasoning_rl.policy.comm import CommMeter, Sharding
from reasoning_rl.policy.model import load_tokenizer, save_hf_model
from reasoning_rl.policy.sharded import load_train_state, save_train_state
from reasoning_rl.policy.train_state import clip_and_step, load_trainable, saved_tensors_on_host
from reasoning_rl.policy.wrap import ScoringModule, equalize, forward_micro, score
from reasoning_rl.policy.zero_advantage import (
    TOKEN_AVERAGES,
    no_row_anywhere,
    trained_rows,
    zero_missing_grads,
)
from reasoning_rl.rollout.buckets import buckets
from reasoning_rl.trace import Progress

if TYPE_CHECKING:
    from reasoning_rl.config.model import LoraConfig

METRIC_KEYS = ("pg_loss", "clip_frac", "ratio_mean", "entropy", "kl")


def lr_lambda(warmup_steps: int, total_steps: int | None) -> Any:
    """Linear warm-up over ``warmup_steps``, then constant, or cosine to 0 by ``total_steps`` if given."""

    def f(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        if total_steps is None:
            return 1.0
        span = max(total_steps - warmup_steps, 1)
        progress = min((step - warmup_steps) / span, 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


class Policy:
    """Trainable causal LM. Build with ``Policy.from_pretrained``."""

    def __init__(
        self,
        module: ScoringModule,
        *,
        source: tuple[str, str | None],
        device: torch.device,
        fsdp: bool,
        lr: float,
        weight_decay: float,
        betas: tuple[float, float],
        grad_clip: float | None,
        warmup_steps: int,
        total_steps: int | None,
        batching: MicroBatching,
        comm: CommMeter | None = None,
        activation_offload: bool = False,
        fused_optimizer: bool = False,
        peft: Any = None,
    ) -> None:
        self.module = module
        self.activation_offload = activation_offload
        self.peft = peft  # the PeftModel around ``lm`` when LoRA adapters are trained (model.lora)
        self.comm = comm
        self.lm: Any = module.lm
        self.source = source
        self.device = device
        self.fsdp = fsdp
        self.grad_clip = grad_clip
        self.batching = batching
        impl = {"fused": True} if fused_optimizer else {"foreach": not fsdp or None}
        self.optimizer = torch.optim.AdamW(
            self.trainable_parameters(), lr=lr, betas=betas, weight_decay=weight_decay, **impl
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(warmup_steps, total_steps)
        )
        self.step = 0

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
        lr: float = 1e-6,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        grad_clip: float | None = 1.0,
        warmup_steps: int = 0,
        total_steps: int | None = None,
        micro_batch_tokens: int = 4096,
        micro_batch_size: int | None = None,
        packing: Packing = "auto",
        chunk_tokens: int = 1024,
        lora: LoraConfig | None = None,
        seed: int = 0,
    ) -> Policy:
        """Load ``path`` (dir, hub id, or GGUF dir + ``gguf_file``) for training.

        ``fsdp=None``: FSDP2 when world_size > 1 or on GPU; ``sharding``: its memory/communication switches. On GPU with FSDP, ``dtype`` is the compute
        dtype (params/grad reduction stay float32). ``micro_batch_tokens`` bounds the positions (padding
        included) per forward; ``micro_batch_size`` optionally also bounds sequences per forward; ``packing``:
        right-padded blocks, packed rows, or whichever is cheaper (``batch.plan_layout``). Memory switches:
        ``activation_checkpointing`` (every ``checkpoint_every``-th layer), ``activation_offload`` (what
        autograd saves stays in host memory), ``fused_optimizer`` (AdamW's fused kernel: no full-size
        temporaries in the optimizer step, 4 bytes a parameter less at its peak than foreach). ``lora``
        (rank > 0): train PEFT LoRA adapters only (``policy/lora.py``), initialised from ``seed``; the
        optimizer holds only their parameters.
        """
        if lr <= 0:
            raise ValueError(f"lr must be > 0; got {lr}")
        batching = MicroBatching(micro_batch_tokens, micro_batch_size, packing)
        module, where, comm, peft = load_trainable(
            path,
            gguf_file=gguf_file,
            dtype=dtype,
            device=device,
            fsdp=fsdp,
            activation_checkpointing=activation_checkpointing,
            checkpoint_every=checkpoint_every,
            compile_layers=compile_layers,
            sharding=sharding,
            head=lambda lm: ScoringModule(lm, chunk_tokens=chunk_tokens, compiled=compile_layers),
            lora=lora,
            seed=seed,
        )
        return cls(
            module,
            source=(path, gguf_file),
            device=where.device,
            fsdp=where.fsdp,
            lr=lr,
            weight_decay=weight_decay,
            betas=betas,
            grad_clip=grad_clip,
            warmup_steps=warmup_steps,
            total_steps=total_steps,
            batching=replace(batching, cost=attention_cost(module.lm.config)),
            comm=comm,
            activation_offload=activation_offload,
            fused_optimizer=fused_optimizer,
            peft=peft,
        )

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """What the optimizer updates: every parameter, or with LoRA only the adapters'."""
        return [p for p in self.module.parameters() if p.requires_grad]

    # ---- scoring -------------------------------------------------------------------------------
    def logprobs(self, batch: TokenBatch, *, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        """Per-response-token log-probs [B, T] (and entropy [B, T]) under the current weights, no grad."""
        return score(self.module, batch, self.device, self.batching, with_entropy=with_entropy)

    def base_logprobs(self, batch: TokenBatch) -> Tensor:
        """Log-probs [B, T] of the base model: the adapters disabled for this pass (the KL reference of a LoRA
        run, with no second copy of the weights). Collective under FSDP2."""
        if self.peft is None:
            raise ValueError("base_logprobs needs LoRA adapters (model.lora.rank > 0)")
        with self.peft.disable_adapter():
            return score(self.module, batch, self.device, self.batching)[0]

    # ---- training ------------------------------------------------------------------------------
    def train_step(
        self,
        batch: TokenBatch,
        advantages: Tensor,
        old_logprobs: Tensor | None,
        ref_logprobs: Tensor | None,
        cfg: LossConfig,
        *,
        max_response_len: int | None = None,
        token_weights: Tensor | None = None,
        progress: Progress | None = None,
    ) -> dict[str, float]:
        """One optimizer step on ``batch`` (micro-batched inside). Call on every rank with its shard.

        advantages: [B] or [B, T]; old_logprobs/ref_logprobs: [B, T] (``batch.shape``). ``old_logprobs=None``:
        the current log-probs, detached (ratio 1: one on-policy update, no separate scoring pass).
        ``max_response_len``: the constant of ``seq-mean-token-sum-norm`` (the run's token budget); None: the
        longest response over all ranks. ``token_weights`` [B, T]: per-token loss weights (rollout-mismatch
        correction), None = 1. ``cfg.skip_zero_advantage``: no forward/backward for rows that cannot have a
        gradient (``zero_advantage``; the step is unchanged). ``progress(k, K)`` is called as micro-batch k of
        this rank's K starts (FSDP2's dummy passes included: they take a collective's time too).
        Returns loss, pg_loss, clip_frac, ratio_mean, entropy, kl (if ref), grad_norm, lr, tokens, micro_batches,
        micro_batch_slots_max (positions of this rank's largest micro-batch: the token budget bounds it),
        padding_share (padding over positions computed, all ranks), packed (1 when the rows were packed),
        skipped_rows and computed_tokens (the real tokens run forward and backward, all ranks: what MFU counts).
        """
        b, t = batch.shape
        if old_logprobs is not None:
            _check_shape("old_logprobs", old_logprobs, (b, t))
        if ref_logprobs is not None:
            _check_shape("ref_logprobs", ref_logprobs, (b, t))
        if advantages.shape not in ((b,), (b, t)):
            raise ValueError(f"advantages must be [B]={b} or [B, T]={(b, t)}; got {tuple(advantages.shape)}")
        mask = batch.response_mask
        max_len = max_response_len
        if cfg.loss_agg == "seq-mean-token-sum-norm" and max_len is None:
            max_len = int(dist.all_reduce_max(torch.tensor(float(t))).item())
        normalizer = float(
            dist.all_reduce_sum(
                torch.tensor(compute_normalizer(cfg.loss_agg, mask, max_response_len=max_len))
            ).item()
        )
        # not with a KL to track: its metric averages over every row (the golden runs pin it)
        keep = (
            trained_rows(advantages, mask, cfg) if cfg.skip_zero_advantage and ref_logprobs is None else None
        )
        scale = 1.0
        if keep is not None and self.fsdp and no_row_anywhere(keep):
            keep = None  # FSDP2: zero gradients cannot be made without a pass; run the (exact) full pass
        layout = self.batching.layout(batch, None if keep is None else keep.nonzero().flatten().tolist())
        if keep is not None:
            live = dist.all_reduce_sum(
                torch.tensor(compute_normalizer(cfg.loss_agg, mask[keep], max_response_len=max_len))
            )
            scale = normalizer / float(live) if float(live) > 0 else 0.0
        world = dist.world_size() if self.fsdp else 1
        sums = torch.zeros(
            len(METRIC_KEYS) + 1, device=self.device
        )  # on device: no host sync per micro-batch
        blocks: list[list[int] | None] = equalize(layout.blocks) if self.fsdp else list(layout.blocks)
        for k, rows in enumerate(blocks, start=1):
            if progress is not None:
                progress(k, len(blocks))
            if rows is None:  # dummy pass so FSDP collectives line up across ranks; contributes 0
                lp_flat, _ = forward_micro(self.module, pack(batch, [0], self.device))
                (lp_flat.sum() * 0.0).backward()
                continue
            mb = pack(batch, rows, self.device, packed=layout.packed)
            with saved_tensors_on_host(self.activation_offload, self.device):
                lp_flat, ent_flat = forward_micro(self.module, mb)
            width = max(mb.lens)
            lp = unflatten(lp_flat.float(), mb.lens, width)
            ent = unflatten(ent_flat.float(), mb.lens, width)
            if not cfg.entropy_coef:
                ent = ent.detach()
            dev = lp.device
            loss, metrics = policy_loss(
                lp,
                lp.detach() if old_logprobs is None else old_logprobs[rows, :width].to(dev),
                advantages[rows].to(dev) if advantages.dim() == 1 else advantages[rows, :width].to(dev),
                mask[rows, :width].to(dev),
                cfg,
                ref_logprobs=None if ref_logprobs is None else ref_logprobs[rows, :width].to(dev),
                entropy=ent,
                normalizer=normalizer,
                token_weights=None if token_weights is None else token_weights[rows, :width].to(dev),
            )
            # FSDP2 averages gradients over ranks; scaling by world size turns that into the sum.
            (loss * world).backward()
            sums[0] += loss.detach()
            for k, key in enumerate(METRIC_KEYS, start=1):
                if key in metrics:
                    sums[k] += metrics[key]
        sums = dist.all_reduce_sum(sums.cpu())
        if keep is not None:
            zero_missing_grads(self.module)  # no row trained anywhere: still the optimizer step of zero grads
        grad_norm = clip_and_step(self.module, self.optimizer, self.grad_clip)
        out = {"loss": float(sums[0]), "grad_norm": grad_norm, "lr": self.optimizer.param_groups[0]["lr"]}
        # no row computed anywhere (every group's rewards equal): a token average has no tokens, so it is left
        # out rather than logged as 0 (an entropy of 0 reads as collapse)
        none_computed = keep is not None and scale == 0.0
        for k, key in enumerate(METRIC_KEYS, start=1):
            if (key != "kl" or ref_logprobs is not None) and not (none_computed and key in TOKEN_AVERAGES):
                out[key] = float(sums[k]) * (scale if key in TOKEN_AVERAGES else 1.0)
        counts = dist.all_reduce_sum(torch.tensor([float(batch.num_tokens), layout.tokens, layout.slots]))
        out["tokens"] = float(counts[0])
        out["computed_tokens"] = float(counts[1])
        out["padding_share"] = 1.0 - float(counts[1] / counts[2]) if float(counts[2]) else 0.0
        out["packed"] = float(layout.packed)
        out["micro_batches"] = float(len(layout.blocks))
        out["micro_batch_slots_max"] = float(layout.largest)  # this rank's (the budget bounds it)
        out["skipped_rows"] = float(len(batch) - int(keep.sum())) if keep is not None else 0.0
        if self.peft is not None:
            from reasoning_rl.policy.lora import adapter_update_norm

            out["adapter_norm"] = adapter_update_norm(self.lm)
        self.scheduler.step()
        self.step += 1
        return out

    # ---- weights out ---------------------------------------------------------------------------
    def iter_full_params(
        self, bucket_bytes: int = 256 << 20, dtype: torch.dtype | None = None
    ) -> Iterator[list[tuple[str, Tensor]]]:
        """Full (unsharded) parameters in buckets of at most ``bucket_bytes`` (one tensor may exceed it).

        HF names (``model.layers.0...``). Collective under FSDP2: every rank must iterate to the end.
        Only one bucket is materialised at a time; without FSDP the tensors are views (no copy). ``dtype``:
        floating tensors cast to it on their device (the engine's dtype: fp32 masters go out as bf16). With
        LoRA: the base model's tensors under its own names, adapted weights merged (new tensors,
        ``policy/lora.py``).
        """
        from reasoning_rl.policy.lora import full, merged_parameters

        named = (
            merged_parameters(self.lm)
            if self.peft is not None
            else ((name, full(p)) for name, p in self.lm.named_parameters())
        )
        if dtype is not None:
            named = ((n, t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t) for n, t in named)
        yield from buckets(named, bucket_bytes)

    def iter_adapter_params(self, bucket_bytes: int = 256 << 20) -> Iterator[list[tuple[str, Tensor]]]:
        """The LoRA adapter tensors alone (``...q_proj.lora_A.default.weight``), in buckets. Collective."""
        from reasoning_rl.policy.lora import adapter_parameters

        if self.peft is None:
            raise ValueError("iter_adapter_params needs LoRA adapters (model.lora.rank > 0)")
        yield from buckets(adapter_parameters(self.lm), bucket_bytes)

    def full_state_dict(self) -> dict[str, Any]:
        """The model's full state dict on CPU (rank 0 under FSDP; empty on other ranks). With LoRA: the merged
        base model's tensors under its names."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if self.peft is not None:
            merged = {n: t.cpu() for bucket in self.iter_full_params() for n, t in bucket}
            return merged if dist.is_main() else {}
        if not self.fsdp:
            return {k: v.detach().cpu() for k, v in self.lm.state_dict().items()}
        state: dict[str, Any] = get_model_state_dict(
            self.lm, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return state

    def save_pretrained(self, out_dir: str | Path) -> Path | None:
        """Write a plain HF model dir (safetensors + tokenizer) atomically from rank 0. Collective."""
        state = self.full_state_dict()
        out = Path(out_dir)
        if dist.is_main():
            path, gguf = self.source
            save_hf_model(out, self.lm, load_tokenizer(path, gguf_file=gguf), state_dict=state)
        dist.barrier()
        return out if dist.is_main() else None

    # ---- checkpoints ---------------------------------------------------------------------------
    def save_sharded(self, directory: str | Path) -> None:
        """Write this rank's shards of the weights, AdamW state, LR schedule and step count into ``directory``
        (torch.distributed.checkpoint; ``policy/sharded.py``). Collective: call on every rank with the same
        path, one all ranks can write to (the checkpoint manager's temporary dir: its rename commits)."""
        save_train_state(
            Path(directory),
            self.module,
            self.optimizer,
            self.scheduler,
            {"step": self.step},
            trainable_only=self.peft is not None,  # LoRA: the adapters and their AdamW state only
        )

    def load_sharded(self, directory: str | Path) -> None:
        """Restore ``save_sharded``'s directory, resharded to this run's world size (any world size may have
        written it). Collective. A missing directory or an old single-file ``policy.pt``: FileNotFoundError."""
        extra = load_train_state(
            Path(directory),
            self.module,
            self.optimizer,
            self.scheduler,
            {"step": self.step},
            what="policy",
            trainable_only=self.peft is not None,
        )
        self.step = int(extra["step"])


def _check_shape(name: str, x: Tensor, shape: tuple[int, int]) -> None:
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} must have the batch's per-token shape [B, T]={shape}; got {tuple(x.shape)}")
