"""PPO's per-token signal: outcome rewards (and the KL penalty) placed on response tokens, GAE advantages
and value targets from the critic's values, and how well the critic explains the returns. [B, T] tensors."""

from __future__ import annotations

import torch
from torch import Tensor

from reasoning_rl.algorithms.kl import KLEstimator, kl_estimate
from reasoning_rl.algorithms.whiten import whiten


def token_rewards(
    rewards: Tensor,
    response_mask: Tensor,
    kl_coef: float = 0.0,
    logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    kl_estimator: KLEstimator = "k1",
) -> Tensor:
    """[B] sequence rewards on each response's last token, minus ``kl_coef`` x the per-token KL to the
    reference on every token (the standard PPO-RLHF reward) when reference log-probs are given."""
    b, t = response_mask.shape
    mask = response_mask.bool()
    if bool((mask.sum(dim=-1) < 1).any()):
        raise ValueError("every response needs at least one token to carry its reward")
    # the last masked-in token (a tool rollout's mask has holes where tool output was inserted)
    last = t - 1 - mask.flip(-1).int().argmax(dim=-1)
    out = torch.zeros(b, t)
    out[torch.arange(b), last] = rewards.float()
    if ref_logprobs is not None and kl_coef > 0:
        if logprobs is None:
            raise ValueError("a KL penalty in the reward needs the policy's log-probs")
        out = out - kl_coef * kl_estimate(logprobs.detach(), ref_logprobs.detach(), kl_estimator).float()
    return out * response_mask


def compute_gae(
    rewards: Tensor, values: Tensor, response_mask: Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over response tokens (Schulman et al. 2016).

    rewards, values, response_mask: [B, T] (token rewards, usually the outcome on the last token).
    Masked positions are skipped: the recursion jumps over them, and they get advantage/return 0.
    Returns (advantages, returns) with returns = advantages + values on valid tokens.
    """
    if not (rewards.shape == values.shape == response_mask.shape) or rewards.dim() != 2:
        raise ValueError(
            f"rewards, values and response_mask must be [B, T] of one shape; got {tuple(rewards.shape)}, "
            f"{tuple(values.shape)}, {tuple(response_mask.shape)}"
        )
    mask = response_mask.to(values.dtype)
    values = values.detach() * mask
    rewards = rewards * mask
    next_value = torch.zeros_like(values[:, 0])
    last_gae = torch.zeros_like(values[:, 0])
    out = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        gae = delta + gamma * lam * last_gae
        m = mask[:, t]
        last_gae = m * gae + (1 - m) * last_gae
        next_value = m * values[:, t] + (1 - m) * next_value
        out[:, t] = m * gae
    return out, (out + values) * mask


def gae_targets(
    rewards: Tensor, values: Tensor, response_mask: Tensor, gamma: float, lam: float
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
