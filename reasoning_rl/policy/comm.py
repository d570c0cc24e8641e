"""FSDP2's switches that trade memory for communication (``model.*`` keys), and the bytes they cost.

``CommMeter`` counts, per rank, the bytes of each collective FSDP2 issues for a wrapped model (decoder layers
and root are its units): all-gathers in forward and backward, reduce-scatters of gradients. A collective's size is its unsharded buffer: the FSDP2 shard (dim 0 padded to a multiple of
the world size) x element size x ranks, as torch.distributed sees it (the all-gather's output, the
reduce-scatter's input: ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` in torch 2.11, ``*_single`` in
newer releases); tests/rl/test_comm.py checks it against those calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

KINDS = ("all_gather", "reduce_scatter")


@dataclass(frozen=True)
class Sharding:
    """How FSDP2 shards a trained model: ``cpu_offload`` keeps params, grads and optimizer state in CPU memory
    (``CPUOffloadPolicy``; the optimizer step runs on CPU); ``reduce_dtype`` is the gradient reduce-scatter's
    dtype; ``reshard_after_forward`` frees gathered layers after forward (re-gathered in backward);
    ``forward_prefetch`` > 0 explicitly prefetches the next N layers' all-gathers (0: FSDP2's defaults)."""

    cpu_offload: bool = False
    reduce_dtype: torch.dtype = torch.float32
    reshard_after_forward: bool = True
    forward_prefetch: int = 0


@dataclass
class Unit:
    """One FSDP2 parameter group: its collective sizes per rank (bytes), and whether it is gathered now."""

    gather: int
    reduce: int
    reshards: bool  # after forward (the root never does: FSDP2's root rule)
    gathered: bool = False


def unit_bytes(
    params: list[nn.Parameter], world: int, gather_dtype: torch.dtype | None, reduce_dtype: torch.dtype | None
) -> tuple[int, int]:
    """(all-gather, reduce-scatter) bytes of one unit: padded shard numel x ranks x element size."""
    if not params:
        return 0, 0
    numel = trainable = 0
    for p in params:
        rows = p.shape[0] if p.dim() > 0 else 1
        n = math.ceil(rows / world) * (p.numel() // max(rows, 1)) * world
        numel += n
        trainable += n if p.requires_grad else 0
    g = torch.empty((), dtype=gather_dtype or params[0].dtype).element_size()
    r = torch.empty((), dtype=reduce_dtype or gather_dtype or params[0].dtype).element_size()
    return numel * g, trainable * r


class CommMeter:
    """Per-rank FSDP2 collective bytes of one model since the last ``take``, from hooks on its units.

    Mirrors FSDP2's unshard/reshard rules: a unit is all-gathered when its forward starts and it is not
    gathered; layers that reshard after forward free it when their forward ends; a forward with grad is
    followed by one backward (every caller does so) that re-gathers what is not gathered, reduce-scatters
    the trainable gradients and frees every unit. Layer forwards outside the root's forward (activation
    checkpointing's recompute in backward) find their unit gathered by that backward: not counted.
    """

    def __init__(self, root: nn.Module, layers: list[nn.Module], units: list[Unit]) -> None:
        self.units = units  # one per layer, then the root's
        self.counts = dict.fromkeys(KINDS, 0)
        self.in_forward = False
        for layer, unit in zip(layers, units, strict=False):
            layer.register_forward_pre_hook(lambda m, a, u=unit: self._gather(u))
            layer.register_forward_hook(lambda m, a, o, u=unit: self._after_layer(u))
        root.register_forward_pre_hook(self._root_start)
        root.register_forward_hook(self._root_end)

    def _gather(self, unit: Unit) -> None:
        if self.in_forward and not unit.gathered:
            self.counts["all_gather"] += unit.gather
            unit.gathered = True

    def _after_layer(self, unit: Unit) -> None:
        if self.in_forward and unit.reshards:
            unit.gathered = False

    def _root_start(self, module: nn.Module, args: Any) -> None:
        self.in_forward = True
        self._gather(self.units[-1])

    def _root_end(self, module: nn.Module, args: Any, output: Any) -> None:
        self.in_forward = False
        if torch.is_grad_enabled():  # the backward that follows
            for unit in self.units:
                if not unit.gathered:
                    self.counts["all_gather"] += unit.gather
                self.counts["reduce_scatter"] += unit.reduce
                unit.gathered = False

    def take(self) -> dict[str, int]:
        """Bytes by kind since the previous call, then start again from 0."""
        out, self.counts = self.counts, dict.fromkeys(KINDS, 0)
        return out


def meter(
    root: nn.Module,
    layers: list[nn.Module],
    world: int,
    *,
    gather_dtype: torch.dtype | None,
    reduce_dtype: torch.dtype | None,
    reshard_after_forward: bool,
) -> CommMeter:
    """The meter of a model sharded per decoder layer + root (the root's unit: what no layer holds)."""
    inner = {id(p) for layer in layers for p in layer.parameters()}
    units = []
    for layer in layers:
        g, r = unit_bytes(list(layer.parameters()), world, gather_dtype, reduce_dtype)
        units.append(Unit(g, r, reshard_after_forward))
    own = [p for p in root.parameters() if id(p) not in inner]
    g, r = unit_bytes(own, world, gather_dtype, reduce_dtype)
    units.append(Unit(g, r, False))
    return CommMeter(root, layers, units)
