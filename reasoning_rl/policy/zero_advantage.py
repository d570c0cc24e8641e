"""Rows that cannot move the policy: with an exactly zero advantage on every response token and no loss term
that reads the row otherwise (an entropy bonus, a KL loss), a row's policy-gradient term and its gradient are
exactly 0, so ``Policy.train_step`` skips its forward and backward. Steps where every GRPO group has equal
rewards then cost an optimizer step, not a full pass that changes nothing. The loss normaliser is still the
whole batch's, so the step is the same as with the rows in it; metrics that average over tokens (ratio,
clip fraction, entropy, KL) are rescaled to the rows that were trained."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from reasoning_rl.algorithms.losses import LossConfig

TOKEN_AVERAGES = ("clip_frac", "ratio_mean", "entropy", "kl")  # METRIC_KEYS a skipped row would dilute


def trained_rows(advantages: Tensor, response_mask: Tensor, cfg: LossConfig) -> Tensor | None:
    """[B] bool: the rows whose loss can have a gradient; None when every row can (entropy or KL loss on)."""
    if cfg.entropy_coef or cfg.uses_kl_loss:
        return None
    if advantages.dim() == 1:
        return advantages != 0
    return (advantages.masked_fill(~response_mask.bool(), 0) != 0).any(dim=1)


def zero_missing_grads(module: nn.Module) -> None:
    """A step in which no row was trained still steps the optimizer on zero gradients, as the full pass would
    have (AdamW's moments and weight decay move the weights; a ``None`` gradient would skip the parameter)."""
    for p in module.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)


def no_row_anywhere(keep: Tensor) -> bool:
    """True when no rank trains any row (collective). Under FSDP2 such a step runs the full pass instead:
    zero gradients made by hand do not match FSDP2's sharded gradients (``clip_grad_norm_`` refuses the mix)."""
    from reasoning_rl import dist

    return float(dist.all_reduce_sum(torch.tensor(float(keep.sum())))) == 0
