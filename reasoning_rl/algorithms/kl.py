"""KL estimators between the policy and a frozen reference, per token (Schulman's k1/k2/k3)."""

from __future__ import annotations

import torch
from torch import Tensor

from reasoning_rl.config import KLEstimator


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled-token log-probs.

    k1 = log r, k2 = (log r)^2 / 2, k3 = r' - 1 - log r' with r' = pi_ref / pi (unbiased, always >= 0),
    where log r = logprobs - ref_logprobs. k3 is clamped to avoid exp overflow on far-off tokens.
    """
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        neg = (-log_ratio).clamp(-20.0, 20.0)
        return torch.exp(neg) - neg - 1.0
    raise ValueError(f"unknown kl_estimator {estimator!r}: expected one of 'k1', 'k2', 'k3'")


def kl_penalized_rewards(
    rewards: Tensor,
    logprobs: Tensor,
    ref_logprobs: Tensor,
    response_mask: Tensor,
    coef: float,
    estimator: KLEstimator = "k1",
) -> Tensor:
    """Sequence rewards minus ``coef`` x the summed per-token KL (the "KL in reward" variant).

    rewards: [B]; logprobs/ref_logprobs/response_mask: [B, T]. The KL term carries no gradient.
    """
    kl = kl_estimate(logprobs.detach(), ref_logprobs.detach(), estimator) * response_mask
    return rewards - coef * kl.sum(dim=-1)
