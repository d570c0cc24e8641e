"""Policy-gradient losses: PPO clip (asymmetric "clip-higher", dual-clip), GSPO, entropy bonus, KL.

``policy_loss`` works on padded [B, T] response-token tensors. Every term is aggregated with
``aggregation.aggregate`` against a normalizer of the GLOBAL batch, so losses (and gradients) of
micro-batches and data-parallel shards sum to exactly the loss of the whole batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from reasoning_rl.algorithms.aggregation import AggMode, aggregate, compute_normalizer
from reasoning_rl.algorithms.kl import kl_estimate
from reasoning_rl.config import LossConfig


def _ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor, level: str) -> Tensor:
    """Importance ratio per token; GSPO: the sequence's geometric-mean ratio, gradient per token."""
    log_ratio = (logprobs - old_logprobs) * mask
    if level == "token":
        return torch.exp(log_ratio.clamp(-20.0, 20.0))
    seq_log_ratio = log_ratio.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
    # s_i,t = sg[s_i] * pi(y_t) / sg[pi(y_t)]: value s_i, gradient s_i * d log pi(y_t) / |y_i|-free.
    token_log = seq_log_ratio.detach() + logprobs - logprobs.detach()
    return torch.exp(token_log.clamp(-20.0, 20.0))


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: LossConfig,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    normalizer: float | None = None,
    max_response_len: int | None = None,
    token_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped surrogate loss (to minimise) and detached metrics.

    logprobs/old_logprobs/response_mask/ref_logprobs/entropy: [B, T]; advantages: [B] (outcome) or
    [B, T] (per token). ``normalizer``: ``compute_normalizer(cfg.loss_agg, GLOBAL mask)``; None = this batch
    (with ``max_response_len`` as seq-mean-token-sum-norm's constant; None = the padded width).
    Metrics (pg_loss, kl, entropy, clip_frac, ratio_mean) use the same aggregation, so they also sum
    across micro-batches to the whole-batch value. ``token_weights`` [B, T] (detached) scale each token's
    policy-gradient term: the rollout-mismatch correction (``rollout_correction.correction_weights``).
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != response_mask.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
            f"response_mask {tuple(response_mask.shape)} must have one shape [B, T]"
        )
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    if advantages.shape != logprobs.shape:
        raise ValueError(
            f"advantages must be [B] or [B, T]; got {tuple(advantages.shape)} for {tuple(logprobs.shape)}"
        )
    mask = response_mask.to(logprobs.dtype)
    if normalizer is None:
        normalizer = compute_normalizer(cfg.loss_agg, response_mask, max_response_len=max_response_len)
    adv = advantages.to(logprobs.dtype).detach()
    old = old_logprobs.to(logprobs.dtype).detach()

    ratio = _ratio(logprobs, old, mask, cfg.ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    pg = torch.maximum(loss_unclipped, loss_clipped)
    clipped = (loss_clipped > loss_unclipped).to(logprobs.dtype)
    if cfg.dual_clip is not None:
        capped = torch.minimum(pg, -adv * cfg.dual_clip)
        pg = torch.where(adv < 0, capped, pg)
    if token_weights is not None:
        pg = pg * token_weights.to(pg.dtype).detach()

    def agg(x: Tensor) -> Tensor:
        return aggregate(x, response_mask, cfg.loss_agg, normalizer)

    pg_loss = agg(pg)
    loss = pg_loss
    metrics: dict[str, Tensor] = {
        "pg_loss": pg_loss.detach(),
        "clip_frac": agg(clipped).detach(),
        "ratio_mean": agg(ratio.detach()),
    }
    if entropy is not None:
        ent = agg(entropy)
        metrics["entropy"] = ent.detach()
        if cfg.entropy_coef:
            loss = loss - cfg.entropy_coef * ent
    if ref_logprobs is not None:
        kl = agg(kl_estimate(logprobs, ref_logprobs.to(logprobs.dtype).detach(), cfg.kl_estimator))
        metrics["kl"] = kl.detach()
        if cfg.uses_kl_loss:
            loss = loss + cfg.kl_coef * kl
    elif cfg.uses_kl_loss:
        raise ValueError("kl_coef > 0 with kl_mode=loss (KL as a loss term) needs ref_logprobs")
    return loss, metrics


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    clip: float | None = 0.2,
    agg: AggMode = "token-mean",
    normalizer: float | None = None,
) -> Tensor:
    """PPO critic loss 0.5 * max((v - R)^2, (v_clipped - R)^2), clipped around the rollout's values."""
    err = (values - returns).square()
    if clip is not None:
        v_clip = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (v_clip - returns).square())
    return 0.5 * aggregate(err, response_mask, agg, normalizer)
