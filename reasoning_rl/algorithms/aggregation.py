"""Loss aggregation whose result does not depend on how the batch is split.

Every mode is written as ``sum(per-sample contribution) / normalizer`` where the normalizer is a
property of the GLOBAL batch (all micro-batches on all data-parallel ranks). Summing the aggregated
loss of each micro-batch (and all-reducing across ranks) therefore equals the loss of the whole batch.
"""

from __future__ import annotations

from typing import get_args

from torch import Tensor

from reasoning_rl.config import AggMode

AGG_MODES: tuple[str, ...] = get_args(AggMode)


def compute_normalizer(agg: AggMode, response_mask: Tensor, *, max_response_len: int | None = None) -> float:
    """The denominator of ``agg`` for the batch described by ``response_mask`` [B, T].

    token-mean: number of response tokens; seq-mean-token-mean: number of sequences;
    seq-mean-token-sum-norm (Dr.GRPO): number of sequences x a constant length (``max_response_len``,
    default the padded width T). Call it on the global batch, or sum the local values across ranks.
    """
    _check_agg(agg)
    mask = response_mask.bool()
    if agg == "token-mean":
        return float(mask.sum().item())
    num_seqs = float(mask.shape[0])
    if agg == "seq-mean-token-mean":
        return num_seqs
    return num_seqs * float(max_response_len if max_response_len is not None else mask.shape[-1])


def aggregate(values: Tensor, response_mask: Tensor, agg: AggMode, normalizer: float | None = None) -> Tensor:
    """Reduce per-token ``values`` [B, T] to a scalar under ``agg``.

    ``normalizer=None`` uses this batch alone (``compute_normalizer``); pass the global value when the
    batch is one piece of a larger one.
    """
    _check_agg(agg)
    mask = response_mask.to(values.dtype)
    if normalizer is None:
        normalizer = compute_normalizer(agg, response_mask)
    denom = max(float(normalizer), 1.0)
    masked = values * mask
    if agg == "seq-mean-token-mean":
        per_seq = masked.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
        return per_seq.sum() / denom
    return masked.sum() / denom


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` where ``mask`` is true (0 when nothing is selected)."""
    m = mask.to(values.dtype)
    return (values * m).sum() / m.sum().clamp(min=1.0)


def _check_agg(agg: str) -> None:
    if agg not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {agg!r}: expected one of {', '.join(AGG_MODES)}")


__all__ = ["AGG_MODES", "AggMode", "aggregate", "compute_normalizer", "masked_mean"]
