"""Fingerprints of tensors and their comparison: the sent side (``SentFingerprints``, in the hand-off stream)
against what an engine holds (``EngineWeights``, read back by the engine itself). Per tensor: float64 sum, sum of
squares and L1 norm, and two order-sensitive sums (each row's sum weighted by its row index, each column's by its
column index), all composing over concatenation along the first dimension (a fused engine parameter's pieces).
Engines and the freshness gate (``reasoning_rl.freshness``) both stand on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

SUM_RTOL = 1e-9  # float64 summation-order slack (pieces of a fused tensor vs the whole)
# The same for the index-weighted sums, relative to (largest index x L1 norm): float64 summation of float32/bf16
# values is ~1e-15 off, so a swap of two rows whose sums differ by more than ~1e-11 of the L1 norm x rows fails.
WEIGHTED_RTOL = 1e-11


@dataclass(frozen=True)
class Fingerprint:
    """Checksum of one tensor: float64 sum, sum of squares and L1 norm; the row-index- and column-index-weighted
    sums (``by_row``: sum over rows r of r x row r's sum, dimension 0; ``by_col`` the same over the last
    dimension, 0 for 1-D tensors); its rows (first dimension), element count and dtype."""

    total: float
    sumsq: float
    numel: int
    dtype: torch.dtype
    l1: float = 0.0
    by_row: float = 0.0
    by_col: float = 0.0
    rows: int = 0

    def plus(self, other: Fingerprint) -> Fingerprint:
        """The fingerprint of ``other`` concatenated after this tensor along dimension 0 (a fused parameter's
        next piece): ``other``'s rows move down by this tensor's rows."""
        return Fingerprint(
            self.total + other.total,
            self.sumsq + other.sumsq,
            self.numel + other.numel,
            self.dtype,
            self.l1 + other.l1,
            self.by_row + other.by_row + self.rows * other.total,
            self.by_col + other.by_col,
            self.rows + other.rows,
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


def _group_sums(ts: list[Tensor]) -> Tensor:
    """[G, 5]: (sum, sum of squares, L1, row-weighted sum, column-weighted sum) in float64 of G tensors of one
    shape and dtype, stacked so each reduction is one kernel for the whole group (a model's layers repeat a few
    shapes: ~13 launches per group instead of per tensor; the hand-off is host-bound), without a host sync."""
    x = ts[0].unsqueeze(0) if len(ts) == 1 else torch.stack(ts)
    shape, g, dev = ts[0].shape, len(ts), ts[0].device
    rows = x.reshape(g, shape[0] if len(shape) else 1, -1).sum(dim=2, dtype=torch.float64)
    by_row = rows @ torch.arange(rows.shape[1], dtype=torch.float64, device=dev)
    if len(shape) >= 2:
        cols = x.reshape(g, -1, shape[-1]).sum(dim=1, dtype=torch.float64)
        by_col = cols @ torch.arange(cols.shape[1], dtype=torch.float64, device=dev)
    else:
        by_col = torch.zeros(g, dtype=torch.float64, device=dev)
    flat = x.reshape(g, -1)
    return torch.stack(
        [
            rows.sum(dim=1),
            torch.linalg.vector_norm(flat, dim=1, dtype=torch.float64).square(),
            torch.linalg.vector_norm(flat, ord=1, dim=1, dtype=torch.float64),
            by_row,
            by_col,
        ],
        dim=1,
    )


class SentFingerprints:
    """Collects the fingerprint of each tensor as the hand-off streams it (``observe`` per tensor), in ``cast``
    (the engine's dtype) when given: what the engine must hold after rounding. Tensors wait (referenced, at
    most ``flush_bytes`` of them) until they are reduced together, those of one shape in one set of kernels;
    the sums stay on the tensors' device until ``result`` (one transfer for all). A waiting tensor must not
    change before it is reduced: the hand-off's tensors are fresh copies or parameters nothing writes meanwhile."""

    def __init__(self, cast: torch.dtype | None = None, flush_bytes: int = 256 << 20) -> None:
        self.cast = cast
        self.flush_bytes = flush_bytes
        self._waiting: list[tuple[str, Tensor]] = []
        self._waiting_bytes = 0
        self._pending: list[tuple[list[str], Tensor, torch.dtype, int, int]] = []  # per group: names, [G, 5]
        self._order: list[str] = []  # as observed: the result keeps it (a mismatch report names the first)

    def observe(self, name: str, tensor: Tensor) -> None:
        t = tensor.detach()
        if self.cast is not None and t.is_floating_point() and t.dtype != self.cast:
            t = t.to(self.cast)  # one transient copy of this tensor, on its device
        self._waiting.append((name, t))
        self._order.append(name)
        self._waiting_bytes += t.numel() * t.element_size()
        if self._waiting_bytes >= self.flush_bytes:
            self._flush()

    def _flush(self) -> None:
        groups: dict[tuple[tuple[int, ...], torch.dtype, torch.device], list[tuple[str, Tensor]]] = {}
        for name, t in self._waiting:
            groups.setdefault((tuple(t.shape), t.dtype, t.device), []).append((name, t))
        for (shape, dtype, _), members in groups.items():
            sums = _group_sums([t for _, t in members])
            rows = shape[0] if shape else 1
            self._pending.append(([n for n, _ in members], sums, dtype, members[0][1].numel(), rows))
        self._waiting, self._waiting_bytes = [], 0

    def result(self) -> dict[str, Fingerprint]:
        self._flush()
        if not self._pending:
            return {}
        dev = self._pending[0][1].device
        sums = torch.cat([p if p.device == dev else p.to(dev) for _, p, _, _, _ in self._pending])
        values = iter(sums.cpu().tolist())
        found = {
            n: Fingerprint(v[0], v[1], k, d, v[2], v[3], v[4], r)
            for names, _, d, k, r in self._pending
            for n, v in zip(names, values, strict=False)  # names first: takes exactly len(names) values
        }
        return {n: found[n] for n in self._order}


def engine_name(hf_name: str, packed: Mapping[str, list[str]]) -> str:
    """The engine parameter that holds HF tensor ``hf_name`` (``...q_proj.weight`` -> ``...qkv_proj.weight``)."""
    return _placement(hf_name, packed)[0]


def _placement(hf_name: str, packed: Mapping[str, list[str]]) -> tuple[str, int]:
    """The engine parameter holding ``hf_name`` and the piece's position in it (0 for an unfused one)."""
    piece_to_fused = {piece: (fused, i) for fused, pieces in packed.items() for i, piece in enumerate(pieces)}
    parts, index = [], 0
    for p in hf_name.split("."):
        fused, i = piece_to_fused.get(p, (p, 0))
        parts.append(fused)
        index = max(index, i)
    return ".".join(parts), index


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
    tol_l1 = (eps + SUM_RTOL) * sent.l1 + 1e-12
    cols = sent.numel // max(sent.rows, 1)
    tol_row = (eps + WEIGHTED_RTOL) * max(held.rows, sent.rows, 1) * sent.l1 + 1e-12
    tol_col = (eps + WEIGHTED_RTOL) * max(cols, 1) * sent.l1 + 1e-12
    return (
        abs(sent.total - held.total) <= tol_sum
        and abs(sent.sumsq - held.sumsq) <= tol_sq
        and abs(sent.l1 - held.l1) <= tol_l1
        and abs(sent.by_row - held.by_row) <= tol_row
        and abs(sent.by_col - held.by_col) <= tol_col
    )


def compare_fingerprints(sent: Mapping[str, Fingerprint], held: EngineWeights) -> str | None:
    """None when every sent tensor arrived and every engine parameter was sent; else a message naming the first
    bad tensor (in send order), then the first engine parameter the hand-off did not cover."""
    by_target: dict[str, list[tuple[int, str, Fingerprint]]] = {}
    for name, fp in sent.items():
        target, index = _placement(name, held.packed)
        by_target.setdefault(target, []).append((index, name, fp))
    grouped: dict[str, tuple[list[str], Fingerprint]] = {}
    for target, parts in by_target.items():
        parts.sort(key=lambda part: part[0])  # the engine's order of the pieces, whatever the send order
        acc = parts[0][2]
        for _, _, fp in parts[1:]:
            acc = acc.plus(fp)
        grouped[target] = ([name for _, name, _ in parts], acc)
    for target, (pieces, fp) in grouped.items():
        got = held.fingerprints.get(target)
        what = pieces[0] if len(pieces) == 1 else f"{target} (from {', '.join(pieces)})"
        if got is None:
            return f"tensor {what}: the engine has no parameter {target!r}"
        if not _agrees(fp, got):
            return (
                f"tensor {what}: sent sum={fp.total:.9g} sumsq={fp.sumsq:.9g}, engine holds "
                f"sum={got.total:.9g} sumsq={got.sumsq:.9g} ({got.dtype}), or its rows/columns are not "
                "in the sent order"
            )
    unsent = [name for name in held.fingerprints if name not in grouped]
    if unsent:
        return (
            f"engine parameter {unsent[0]!r} was not in the hand-off ({len(unsent)} such): it would keep "
            "serving stale values"
        )
    return None
