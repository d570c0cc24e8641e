"""Layout-free fingerprints of tensors (float64 sum and sum of squares per tensor) and their comparison: the
sent side (``SentFingerprints``, in the hand-off stream) against what an engine holds (``EngineWeights``, read
back by the engine itself). Engines and the freshness gate (``reasoning_rl.freshness``) both stand on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

SUM_RTOL = 1e-9  # float64 summation-order slack (pieces of a fused tensor vs the whole)


@dataclass(frozen=True)
class Fingerprint:
    """Layout-free checksum of one tensor: float64 sum and sum of squares, element count, dtype."""

    total: float
    sumsq: float
    numel: int
    dtype: torch.dtype

    def plus(self, other: Fingerprint) -> Fingerprint:
        """The fingerprint of the two tensors concatenated (a fused parameter's pieces)."""
        return Fingerprint(
            self.total + other.total, self.sumsq + other.sumsq, self.numel + other.numel, self.dtype
        )


@dataclass
class EngineWeights:
    """An engine's parameters as fingerprints under its own names, and how its fused names map to HF pieces
    (``{"qkv_proj": ["q_proj", "k_proj", "v_proj"]}``: one path component replaced)."""

    fingerprints: dict[str, Fingerprint]
    packed: dict[str, list[str]] = field(default_factory=dict)


def fingerprint_tensors(
    named: Iterable[tuple[str, Tensor]], cast: torch.dtype | None = None
) -> dict[str, Fingerprint]:
    """Fingerprints of ``named`` tensors, reduced where they lie, with one host sync for all of them."""
    collector = SentFingerprints(cast)
    for name, t in named:
        collector.observe(name, t)
    return collector.result()


def _device_pair(t: Tensor) -> Tensor:
    """(sum, sum of squares) in float64 on the tensor's device, without a host sync."""
    return torch.stack(
        [t.sum(dtype=torch.float64), torch.linalg.vector_norm(t, dtype=torch.float64).square()]
    )


class SentFingerprints:
    """Collects the fingerprint of each tensor as the hand-off streams it (``observe`` per tensor), in ``cast``
    (the engine's dtype) when given: what the engine must hold after rounding. Reductions stay on the
    tensors' device until ``result`` (one transfer for all)."""

    def __init__(self, cast: torch.dtype | None = None) -> None:
        self.cast = cast
        self._pending: list[tuple[str, Tensor, torch.dtype, int]] = []

    def observe(self, name: str, tensor: Tensor) -> None:
        t = tensor.detach()
        if self.cast is not None and t.is_floating_point() and t.dtype != self.cast:
            t = t.to(self.cast)  # one transient copy of this tensor, on its device
        self._pending.append((name, _device_pair(t), t.dtype, t.numel()))

    def result(self) -> dict[str, Fingerprint]:
        if not self._pending:
            return {}
        dev = self._pending[0][1].device
        pairs = torch.stack([p if p.device == dev else p.to(dev) for _, p, _, _ in self._pending])
        values = pairs.cpu().tolist()
        return {
            n: Fingerprint(v[0], v[1], k, d) for (n, _, d, k), v in zip(self._pending, values, strict=True)
        }


def engine_name(hf_name: str, packed: Mapping[str, list[str]]) -> str:
    """The engine parameter that holds HF tensor ``hf_name`` (``...q_proj.weight`` -> ``...qkv_proj.weight``)."""
    piece_to_fused = {piece: fused for fused, pieces in packed.items() for piece in pieces}
    parts = hf_name.split(".")
    return ".".join(piece_to_fused.get(p, p) for p in parts)


def _cast_eps(sent: torch.dtype, held: torch.dtype) -> float:
    """Relative rounding of casting ``sent`` values to ``held`` (0 when nothing is lost)."""
    if not (sent.is_floating_point and held.is_floating_point):
        return 0.0
    if torch.finfo(held).eps <= torch.finfo(sent).eps:
        return 0.0
    return torch.finfo(held).eps / 2


def _agrees(sent: Fingerprint, held: Fingerprint) -> bool:
    eps = _cast_eps(sent.dtype, held.dtype)
    l1_bound = math.sqrt(max(sent.numel, 1) * max(sent.sumsq, 0.0))  # >= sum |x|
    tol_sum = (eps + SUM_RTOL) * l1_bound + 1e-12
    tol_sq = (2 * eps + eps * eps + SUM_RTOL) * sent.sumsq + 1e-12
    return abs(sent.total - held.total) <= tol_sum and abs(sent.sumsq - held.sumsq) <= tol_sq


def compare_fingerprints(sent: Mapping[str, Fingerprint], held: EngineWeights) -> str | None:
    """None when every sent tensor arrived; else a message naming the first bad tensor (in send order)."""
    grouped: dict[str, tuple[list[str], Fingerprint]] = {}
    for name, fp in sent.items():
        target = engine_name(name, held.packed)
        if target in grouped:
            pieces, acc = grouped[target]
            grouped[target] = ([*pieces, name], acc.plus(fp))
        else:
            grouped[target] = ([name], fp)
    for target, (pieces, fp) in grouped.items():
        got = held.fingerprints.get(target)
        what = pieces[0] if len(pieces) == 1 else f"{target} (from {', '.join(pieces)})"
        if got is None:
            return f"tensor {what}: the engine has no parameter {target!r}"
        if not _agrees(fp, got):
            return (
                f"tensor {what}: sent sum={fp.total:.9g} sumsq={fp.sumsq:.9g}, engine holds "
                f"sum={got.total:.9g} sumsq={got.sumsq:.9g} ({got.dtype})"
            )
    return None
