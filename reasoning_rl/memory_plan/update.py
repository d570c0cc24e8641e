"""A training rank's memory: what it keeps between passes (its shards, optimizer state, reference), what FSDP2
gathers while a micro-batch runs, the activations it saves, and from them the update and log-prob peaks and the
largest micro-batch token budget that fits."""

from __future__ import annotations

import math
from dataclasses import dataclass

from reasoning_rl.config import Config, LoraConfig
from reasoning_rl.memory_plan.shapes import DTYPE_BYTES, Adapters, ModelShape

BUDGET_STEP = 256  # planned micro-batch budgets are multiples of this
LOSS_BYTES_PER_TOKEN = 96  # fp32 per-token tensors of the loss (ratio, clipped terms, masks, ...)


@dataclass(frozen=True)
class TrainSetup:
    """What decides a rank's trainer memory, resolved from the config and the device."""

    compute_bytes: int
    master_bytes: int
    world: int = 1
    cpu_offload: bool = False
    checkpointing: bool = False
    checkpoint_every: int = 1
    activation_offload: bool = False
    compiled: bool = False
    reshard_after_forward: bool = True
    reduce_bytes: int = 4
    chunk_tokens: int = 1024
    ref: str = "none"  # none | device | cpu
    critic: bool = False
    fused_optimizer: bool = False
    engine_in_update: int = 0  # bytes the engine holds during the trainer's passes (asleep or awake)
    lora: LoraConfig | None = None  # model.lora when its rank > 0: only the adapters are trained
    handoff_bucket: int = 256 << 20  # rollout.handoff_bucket_mb in bytes

    def adapters(self, shape: ModelShape) -> Adapters | None:
        return None if self.lora is None else Adapters.of(shape, self.lora)

    @property
    def gathered_bytes(self) -> int:
        """A full tensor as FSDP2 gathers it: the master dtype, or with LoRA the frozen base's compute dtype."""
        return self.compute_bytes if self.lora is not None else self.master_bytes

    @property
    def adapter_bytes(self) -> int:
        """The adapters' compute dtype: ``b`` under FSDP2's mixed precision, else their fp32 masters."""
        return self.compute_bytes if self.master_bytes > self.compute_bytes else 4

    @classmethod
    def of(cls, cfg: Config, *, device: str, dtype: str, world: int) -> TrainSetup:
        m = cfg.model
        b = DTYPE_BYTES[dtype]
        fsdp = {"on": True, "off": False, "auto": world > 1 or device == "cuda"}[m.fsdp]
        compiled = m.compile if m.compile is not None else device == "cuda"
        ref = (
            "none" if cfg.algorithm.kl_coef <= 0 or m.lora.enabled else ("cpu" if m.ref_offload else "device")
        )
        return cls(
            compute_bytes=b,
            master_bytes=4 if fsdp and device == "cuda" else b,
            world=world if fsdp else 1,
            cpu_offload=m.cpu_offload,
            checkpointing=m.gradient_checkpointing,
            checkpoint_every=m.gradient_checkpointing_every,
            activation_offload=m.activation_offload,
            compiled=compiled,
            reshard_after_forward=m.reshard_after_forward,
            reduce_bytes=DTYPE_BYTES[m.reduce_dtype],
            ref=ref,
            critic=cfg.algorithm.name == "ppo",
            fused_optimizer=(
                cfg.optim.fused if cfg.optim.fused is not None else device == "cuda" and not m.cpu_offload
            ),
            lora=m.lora if m.lora.enabled else None,
            handoff_bucket=cfg.rollout.handoff_bucket_mb << 20,
        )


def trained_bytes(
    shape: ModelShape, s: TrainSetup, adapters: Adapters | None, *, grads: bool = True
) -> dict[str, int]:
    """One trained model's shard of params, gradients and AdamW moments (wherever they live): all in the master
    dtype, or with ``adapters`` the frozen base in the compute dtype and only the fp32 adapters trained."""
    share = math.ceil(shape.params / s.world)
    if adapters is None:
        trained, base = share, 0
        master = s.master_bytes
    else:
        trained, base = math.ceil(adapters.params / s.world), s.compute_bytes * share
        master = 4
    return {
        "params": base + master * trained,
        "grads": master * trained * grads,
        "optimizer": 2 * master * trained,
    }


def kept_bytes(shape: ModelShape, s: TrainSetup, *, grads: bool = True) -> dict[str, int]:
    """What stays on the device between passes: the trained models' shards and states, the reference."""
    share = math.ceil(shape.params / s.world)
    on_device = 0 if s.cpu_offload else 1
    out = {k: v * on_device for k, v in trained_bytes(shape, s, s.adapters(shape), grads=grads).items()}
    if s.critic:  # the critic trains in full (no adapters)
        out["critic"] = sum(trained_bytes(shape, s, None, grads=grads).values()) * on_device
    if s.ref == "device":
        out["reference"] = s.compute_bytes * share
    if s.engine_in_update:
        out["engine"] = s.engine_in_update
    return out


def gathered_bytes(shape: ModelShape, s: TrainSetup) -> int:
    """FSDP2's unsharded parameters (and one layer's unsharded gradients: with LoRA only its adapters') while a
    micro-batch runs."""
    b = s.compute_bytes
    layers = shape.layers if not s.reshard_after_forward else min(2, shape.layers)
    adapters = s.adapters(shape)
    extra = 0 if adapters is None else adapters.layer_params
    trained = shape.layer_params if adapters is None else extra
    grads = 2 * (b + s.reduce_bytes) * trained
    return b * shape.root_params + b * layers * (shape.layer_params + extra) + grads


def activation_bytes(shape: ModelShape, s: TrainSetup, tokens: int) -> int:
    """Saved activations of a micro-batch of ``tokens`` (padded block tokens) at the start of backward, plus
    the working set of the layer being recomputed / back-propagated."""
    b = s.compute_bytes
    adapters = s.adapters(shape)
    layer = shape.layer_saved_bytes(b, s.compiled)
    layer += 0 if adapters is None else adapters.saved_bytes(b, s.adapter_bytes)
    ckpt = math.ceil(shape.layers / s.checkpoint_every) if s.checkpointing else 0
    saved = ckpt * b * shape.hidden + (shape.layers - ckpt) * layer + shape.model_saved_bytes(b)
    if s.activation_offload:  # saved on the host; the layer in flight is on the device
        saved = layer
    recompute = layer if ckpt else 0
    return tokens * (saved + recompute + shape.forward_transient_bytes(b) + LOSS_BYTES_PER_TOKEN)


def update_terms(shape: ModelShape, s: TrainSetup, tokens: int) -> dict[str, int]:
    """The update's peak by term: kept memory, gathered weights, activations and the head's chunk, or the
    optimizer step's (kept memory + foreach temporaries) when that is larger."""
    kept = kept_bytes(shape, s)
    chunk = shape.head_chunk_bytes(s.compute_bytes, min(s.chunk_tokens, tokens))
    backward = {
        **kept,
        "gathered": gathered_bytes(shape, s),
        "activations": activation_bytes(shape, s, tokens),
        "logprob_chunk": chunk,
    }
    foreach = not (s.cpu_offload or s.fused_optimizer)  # foreach AdamW: one full-size temporary (sqrt of v)
    adapters = s.adapters(shape)
    trained = trained_bytes(shape, s, adapters)["grads"]  # the temporary is the size of the trained shard
    step = {**kept, "optimizer_step": foreach * trained}
    return backward if sum(backward.values()) >= sum(step.values()) else step


def update_peak(shape: ModelShape, s: TrainSetup, tokens: int) -> int:
    return sum(update_terms(shape, s, tokens).values())


def logprob_peak(shape: ModelShape, s: TrainSetup, tokens: int) -> int:
    """A no-grad scoring pass (old log-probs, reference, critic values) over ``tokens``: kept memory (no
    gradients: the optimizer step frees them), gathered weights, one layer's working set and the head's chunk."""
    b = s.compute_bytes
    kept = sum(kept_bytes(shape, s, grads=False).values())
    per_token = shape.forward_transient_bytes(b) + 2 * b * shape.hidden + LOSS_BYTES_PER_TOKEN
    return (
        kept
        + gathered_bytes(shape, s)
        + tokens * per_token
        + shape.head_chunk_bytes(b, min(s.chunk_tokens, tokens))
    )


def largest_budget(shape: ModelShape, s: TrainSetup, usable: int) -> int:
    """The largest micro-batch token budget (a multiple of ``BUDGET_STEP``) whose update peak fits ``usable``
    bytes; 0 when not even ``BUDGET_STEP`` tokens fit. Peaks grow linearly in tokens past one chunk."""
    lo, hi = 0, BUDGET_STEP
    while update_peak(shape, s, hi) <= usable and hi < 1 << 24:
        lo, hi = hi, hi * 2
    while hi - lo > BUDGET_STEP:
        mid = (lo + hi) // 2 // BUDGET_STEP * BUDGET_STEP
        lo, hi = (mid, hi) if update_peak(shape, s, mid) <= usable else (lo, mid)
    return lo


def host_bytes(shape: ModelShape, s: TrainSetup) -> int:
    """What the offload switches keep in host memory: with ``cpu_offload`` the trained models' fp32 params,
    gradients and AdamW moments (16 bytes a parameter, per rank's shard; with LoRA the frozen base and the
    adapters' states), with the reference offloaded its weights."""
    share = math.ceil(shape.params / s.world)
    out = 0
    if s.cpu_offload:
        out = sum(trained_bytes(shape, s, s.adapters(shape)).values())
        out += sum(trained_bytes(shape, s, None).values()) if s.critic else 0
    return out + (s.compute_bytes * share if s.ref == "cpu" else 0)
