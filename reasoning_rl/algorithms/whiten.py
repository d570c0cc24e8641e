"""Batch whitening, the one definition: REINFORCE++ normalises rewards with it, PPO its GAE advantages."""

from __future__ import annotations

from torch import Tensor

EPS = 1e-6  # added to the std: keeps a near-constant batch finite without biasing a std of order 1


def whiten(x: Tensor, mask: Tensor) -> Tensor:
    """(x - mean) / (std + EPS) over the entries where ``mask`` is true (unbiased std); 0 elsewhere.

    Fewer than two valid entries carry no spread to normalise by: all zeros.
    """
    w = mask.to(x.dtype)
    n = w.sum()
    if n < 2:
        return x.new_zeros(x.shape)
    mean = (x * w).sum() / n
    var = ((x - mean).square() * w).sum() / (n - 1.0)
    return (x - mean) / (var.sqrt() + EPS) * w
