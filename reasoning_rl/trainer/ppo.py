"""PPO's per-token signal for the trainer: outcome rewards (and KL-in-reward) placed on response tokens,
critic values -> GAE advantages and value targets. Pure tensor functions over the batch's [B, T] layout."""

from __future__ import annotations

import torch
from torch import Tensor

from reasoning_rl.algorithms import KLEstimator, compute_gae, kl_estimate

EPS = 1e-8


def token_rewards(rewards: Tensor, response_mask: Tensor, kl_coef: float = 0.0, logprobs: Tensor | None = None,
                  ref_logprobs: Tensor | None = None, kl_estimator: KLEstimator = "k1") -> Tensor:
    """[B] sequence rewards on each response's last token, minus ``kl_coef`` x the per-token KL to the
    reference on every token (the standard PPO-RLHF reward) when reference log-probs are given."""
    b, t = response_mask.shape
    lens = response_mask.sum(dim=-1)
    if bool((lens < 1).any()):
        raise ValueError("every response needs at least one token to carry its reward")
    out = torch.zeros(b, t)
    out[torch.arange(b), lens - 1] = rewards.float()
    if ref_logprobs is not None and kl_coef > 0:
        if logprobs is None:
            raise ValueError("a KL penalty in the reward needs the policy's log-probs")
        out = out - kl_coef * kl_estimate(logprobs.detach(), ref_logprobs.detach(), kl_estimator).float()
    return out * response_mask


def whiten(x: Tensor, mask: Tensor) -> Tensor:
    """(x - mean) / std over the valid tokens of the whole batch; 0 elsewhere (PPO's advantage normalisation)."""
    w = mask.to(x.dtype)
    n = w.sum()
    if n < 2:
        return x * w
    mean = (x * w).sum() / n
    var = ((x - mean).square() * w).sum() / (n - 1)
    return (x - mean) / (var.sqrt() + EPS) * w


def gae_targets(rewards: Tensor, values: Tensor, response_mask: Tensor, gamma: float, lam: float
                ) -> tuple[Tensor, Tensor]:
    """(whitened advantages, returns) [B, T]: returns are the critic's targets, never whitened."""
    adv, returns = compute_gae(rewards, values, response_mask, gamma=gamma, lam=lam)
    return whiten(adv, response_mask), returns


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over valid tokens: 1 = perfect critic, <= 0 = no better than
    a constant. NaN when the returns do not vary."""
    m = mask.bool()
    r, v = returns[m].float(), values[m].float()
    if r.numel() < 2:
        return float("nan")
    var = r.var()
    return float(1.0 - (r - v).var() / var) if float(var) > 0 else float("nan")
