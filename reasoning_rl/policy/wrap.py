"""Wrapping an HF causal LM for scoring/training: micro-batch forward, FSDP2 sharding, mixed precision."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn
from torch._dynamo.decorators import mark_unbacked

from reasoning_rl import dist
from reasoning_rl.policy.batch import MicroBatch, MicroBatching, TokenBatch, pack, unflatten
from reasoning_rl.policy.comm import CommMeter, Sharding, meter
from reasoning_rl.policy.logprobs import token_logprobs

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule


class ScoringModule(nn.Module):
    """Root module that FSDP2 wraps: micro-batch forward + chunked log-probs of response tokens.

    Routing the LM head through this module's forward keeps FSDP2's hooks in charge of gathering the
    embedding/head parameters (they live in the root shard group, so tied embeddings stay tied).
    """

    def __init__(self, lm: Any, chunk_tokens: int = 1024, compiled: bool = False) -> None:
        super().__init__()
        self.lm: Any = lm
        self.chunk_tokens = chunk_tokens
        self.compiled = compiled

    def forward(
        self, input_ids: Tensor, gather: Tensor, targets: Tensor, position_ids: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        h = response_hidden(self.lm, input_ids, gather, position_ids)
        return token_logprobs(
            self.lm.get_output_embeddings(),
            h,
            targets,
            chunk_tokens=self.chunk_tokens,
            compiled=self.compiled,
        )


@dataclass
class Placement:
    """Where and how a model runs. ``dtype`` is the compute dtype; FSDP on GPU keeps fp32 masters."""

    device: torch.device
    dtype: torch.dtype
    fsdp: bool

    @property
    def load_dtype(self) -> torch.dtype:
        return torch.float32 if self.fsdp and self.device.type == "cuda" else self.dtype


def placement(device: str | None, dtype: torch.dtype, fsdp: bool | None) -> Placement:
    """Resolve defaults: GPU if present; FSDP when world_size > 1 or on GPU."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' requested but no CUDA device is available")
    use_fsdp = (dist.world_size() > 1 or dev.type == "cuda") if fsdp is None else fsdp
    if not use_fsdp and dist.world_size() > 1:
        raise ValueError(
            f"fsdp=False with world_size={dist.world_size()}: multi-process training needs FSDP2"
        )
    if dev.type == "cuda":
        dev = torch.device("cuda", dist.local_rank())
    return Placement(dev, dtype, use_fsdp)


def decoder_layers(lm: Any) -> nn.ModuleList:
    """The transformer blocks (each becomes one FSDP2 unit)."""
    base = lm.base_model
    layers = getattr(base, "layers", None) or getattr(base, "h", None)
    if isinstance(layers, nn.ModuleList):
        return layers
    for m in base.modules():
        if isinstance(m, nn.ModuleList) and len(m) > 0:
            return m
    raise ValueError(f"cannot find the decoder layers of {type(lm).__name__} to shard")


def wrap(
    module: nn.Module,
    lm: Any,
    where: Placement,
    *,
    activation_checkpointing: bool = False,
    sharding: Sharding = Sharding(),
    compile_layers: bool = False,
    checkpoint_every: int = 1,
) -> CommMeter | None:
    """Shard ``module`` (which contains ``lm``) with FSDP2 per decoder layer + root, or move it to device.

    Returns the meter of FSDP2's collective bytes (None without FSDP). ``compile_layers``: ``torch.compile``
    each decoder layer's forward (torchtitan's per-block scheme). All layers share one compiled graph;
    FSDP2's hooks stay outside it because only ``forward`` is compiled. ``activation_checkpointing``
    recomputes decoder layers 0, k, 2k, ... in backward (k = ``checkpoint_every``; HF's per-layer switch).
    """
    if activation_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for k, layer in enumerate(decoder_layers(lm)):
            if not hasattr(layer, "gradient_checkpointing"):
                raise ValueError(f"{type(layer).__name__} has no per-layer gradient checkpointing switch")
            cast(Any, layer).gradient_checkpointing = k % checkpoint_every == 0
    if compile_layers:
        for layer in decoder_layers(lm):
            layer.forward = rows_unbacked(torch.compile(layer.forward, dynamic=True))
    if not where.fsdp:
        module.to(where.device)
        return None
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    dist.init()
    mesh = init_device_mesh(where.device.type, (dist.world_size(),))
    kw: dict[str, Any] = {"mesh": mesh}
    param_dtype = where.dtype if where.device.type == "cuda" and where.dtype != torch.float32 else None
    reduce_dtype = None
    if param_dtype is not None or sharding.reduce_dtype != torch.float32:
        reduce_dtype = sharding.reduce_dtype
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    kw["offload_policy"] = (
        CPUOffloadPolicy(pin_memory=where.device.type == "cuda") if sharding.cpu_offload else OffloadPolicy()
    )
    layers = list(decoder_layers(lm))
    for layer in layers:
        fully_shard(layer, reshard_after_forward=sharding.reshard_after_forward, **kw)
    fully_shard(module, **kw)  # the root keeps FSDP2's default: no reshard between forward and backward
    if sharding.forward_prefetch > 0:
        k = sharding.forward_prefetch
        units = cast("list[FSDPModule]", layers)
        for i, unit in enumerate(units):
            unit.set_modules_to_forward_prefetch(units[i + 1 : i + 1 + k])
            unit.set_modules_to_backward_prefetch(units[max(i - k, 0) : i][::-1])
    return meter(
        module,
        layers,
        dist.world_size(),
        gather_dtype=param_dtype,
        reduce_dtype=reduce_dtype,
        reshard_after_forward=sharding.reshard_after_forward,
    )


def rows_unbacked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(hidden_states [b, L, H], ...)`` with the row dimension marked unbacked on every call.

    ``dynamic=True`` alone still specialises a size of 1 (0/1 specialisation): the first micro-batch of one row
    (the leftover block of a batch) recompiled every layer (issue 20: a 36-s update instead of ~3 s). An unbacked
    row count is never assumed to be 1, so one graph serves every block; the width ``L`` is dynamic and >= 2.
    """

    def call(hidden_states: Tensor, *args: Any, **kwargs: Any) -> Any:
        mark_unbacked(hidden_states, 0)
        return fn(hidden_states, *args, **kwargs)

    return call


def score(
    module: nn.Module,
    batch: TokenBatch,
    device: torch.device,
    batching: MicroBatching,
    *,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """No-grad log-probs (and entropy) of ``batch``'s response tokens, [B, T] each, micro-batched."""
    b, t = batch.shape
    logp = torch.zeros(b, t)
    ent = torch.zeros(b, t) if with_entropy else None
    layout = batching.layout(batch, training=False)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            for rows in equalize(layout.blocks):
                if rows is None:  # keep in step with ranks that have more micro-batches (FSDP collectives)
                    forward_micro(module, pack(batch, [0], device))
                    continue
                mb = pack(batch, rows, device, packed=layout.packed)
                lp, en = forward_micro(module, mb)
                logp[rows] = unflatten(lp.float().cpu(), mb.lens, t)
                if ent is not None:
                    ent[rows] = unflatten(en.float().cpu(), mb.lens, t)
    finally:
        module.train(was_training)
    return logp, ent


def equalize(plans: list[list[int]]) -> list[list[int] | None]:
    """Pad with ``None`` (a dummy pass) to the largest micro-batch count of any rank.

    Under FSDP2 every forward/backward is a collective: ranks must run the same number of them.
    """
    count = int(dist.all_reduce_max(torch.tensor(float(len(plans)))).item())
    return [*plans, *([None] * (count - len(plans)))]


def response_hidden(lm: Any, input_ids: Tensor, gather: Tensor, position_ids: Tensor | None = None) -> Tensor:
    """Final hidden states [R, H] at ``gather`` (flat positions) of a micro-batch.

    Right-padded block (``position_ids`` None): no attention mask and default positions, so plain causal
    attention (the flash path of SDPA); the padding after each sequence is never attended to by its real
    tokens. Packed row: ``position_ids`` restart at 0 per sequence and, with no attention mask, transformers
    turns the restarts into document boundaries for the model's attention implementation.
    """
    out = lm.base_model(input_ids=input_ids, position_ids=position_ids, use_cache=False)
    hidden = out.last_hidden_state
    return hidden.reshape(-1, hidden.shape[-1]).index_select(0, gather)


def forward_micro(module: nn.Module, mb: MicroBatch) -> tuple[Tensor, Tensor]:
    out: tuple[Tensor, Tensor] = module(mb.input_ids, mb.gather, mb.targets, mb.position_ids)
    return out
