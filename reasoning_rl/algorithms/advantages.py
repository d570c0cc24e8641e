"""Advantage estimators for outcome rewards (GRPO family, RLOO, REINFORCE++); GAE for PPO is in ``gae``.

All outcome estimators take per-sample rewards [N], the group (prompt) id of each sample [N] and a
validity mask [N]; each registers itself in ``reasoning_rl.registry.ESTIMATORS`` (plugins add theirs the
same way, or through the ``reasoning_rl.advantages`` entry points). Invalid samples (grader verdict ``error``) get advantage 0 and are left out of
every statistic, so they neither push the policy nor shift their group's baseline.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from reasoning_rl.algorithms.whiten import whiten
from reasoning_rl.registry import ESTIMATORS

Estimator = Callable[[Tensor, Tensor, Tensor], Tensor]  # (rewards, group_ids, mask) -> advantages, all [N]
EPS = 1e-6  # GRPO: r / (group std + EPS)


def _group_stats(rewards: Tensor, group_ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample (group mean, group unbiased std, group valid count) over valid members only."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    w = mask.to(rewards.dtype)
    count = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, inverse, w)
    total = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, inverse, rewards * w)
    mean = total / count.clamp(min=1.0)
    sq = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(
        0, inverse, (rewards - mean[inverse]).square() * w
    )
    std = (sq / (count - 1.0).clamp(min=1.0)).sqrt()
    return mean[inverse], std[inverse], count[inverse]


def _grpo(rewards: Tensor, group_ids: Tensor, mask: Tensor, scale: bool) -> Tensor:
    mean, std, count = _group_stats(rewards, group_ids, mask)
    adv = rewards - mean
    if scale:
        adv = adv / (std + EPS)
    # A lone valid sample has no baseline to compare against: it carries no signal.
    return torch.where(count > 1, adv, torch.zeros_like(adv))


@ESTIMATORS.register("grpo")
def grpo(rewards: Tensor, group_ids: Tensor, mask: Tensor) -> Tensor:
    """(r - group mean) / (group std + eps)  (Shao et al. 2024; std is Bessel-corrected as in TRL/verl)."""
    return _grpo(rewards, group_ids, mask, scale=True)


@ESTIMATORS.register("drgrpo")
def drgrpo(rewards: Tensor, group_ids: Tensor, mask: Tensor) -> Tensor:
    """r - group mean: Dr.GRPO drops the std division, which biases towards easy/hard prompts."""
    return _grpo(rewards, group_ids, mask, scale=False)


@ESTIMATORS.register("rloo")
def rloo(rewards: Tensor, group_ids: Tensor, mask: Tensor) -> Tensor:
    """r_i - mean of the OTHER valid samples of the group = n/(n-1) (r_i - group mean)."""
    mean, _, count = _group_stats(rewards, group_ids, mask)
    adv = (rewards - mean) * count / (count - 1.0).clamp(min=1.0)
    return torch.where(count > 1, adv, torch.zeros_like(adv))


@ESTIMATORS.register("reinforce_pp")
def reinforce_pp(rewards: Tensor, group_ids: Tensor, mask: Tensor) -> Tensor:
    """REINFORCE++ (Hu 2025): the reward normalised over the whole batch, no per-group baseline."""
    return whiten(rewards, mask)


@ESTIMATORS.register("reinforce_pp_baseline")
def reinforce_pp_baseline(rewards: Tensor, group_ids: Tensor, mask: Tensor) -> Tensor:
    """REINFORCE++-baseline: subtract the group mean, then normalise over the whole batch."""
    mean, _, _ = _group_stats(rewards, group_ids, mask)
    return whiten(rewards - mean, mask)


def compute_advantages(
    estimator: str, rewards: Tensor, group_ids: Tensor, mask: Tensor | None = None
) -> Tensor:
    """Per-sample advantages [N] (float32); masked-out samples get exactly 0.

    rewards: [N] float; group_ids: [N] int (samples of one prompt share an id); mask: [N] bool,
    False where the grader could not judge (excluded from group and batch statistics).
    """
    fn: Estimator = ESTIMATORS.get(estimator)
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    group_ids = torch.as_tensor(group_ids)
    mask = (
        torch.ones_like(rewards, dtype=torch.bool)
        if mask is None
        else torch.as_tensor(mask, dtype=torch.bool)
    )
    if not (rewards.shape == group_ids.shape == mask.shape) or rewards.dim() != 1:
        raise ValueError(
            f"rewards, group_ids and mask must be 1-D of equal length; got {tuple(rewards.shape)}, "
            f"{tuple(group_ids.shape)}, {tuple(mask.shape)}"
        )
    if rewards.numel() == 0:
        return rewards.clone()
    if not torch.isfinite(rewards[mask]).all():
        raise ValueError("rewards contain NaN/inf for unmasked samples; mask them or fix the grader output")
    safe = torch.where(mask, rewards, torch.zeros_like(rewards))
    adv = fn(safe, group_ids, mask)
    return torch.where(mask, adv, torch.zeros_like(adv))
