"""Rollout/trainer mismatch: measure it, and correct the policy gradient for it.

The engine samples with its own kernels (and dtype), so its log-probs of the sampled tokens drift from the
trainer's even with identical weights. The samples then come from pi_rollout, not from pi_old, and the
PPO ratio pi/pi_old is off by pi_old/pi_rollout per token. The fixes from the literature (Yao et al.,
"Your efficient RL framework secretly brings you off-policy RL training", 2025; Liu et al., "When speed
kills stability", 2025), as in verl's ``rollout_is`` and TRL's ``vllm_importance_sampling_correction``:

- token-level truncated importance sampling (TIS): each token's loss is weighted by
  ``min(exp(old - rollout), cap)``, detached (the cap bounds the variance; default 2, as in both);
- sequence-level masking (MIS): a sequence whose ratio is outside ``[lo, hi]`` is dropped from the
  loss (weight 0). The ratio is the product over its tokens (``level="sequence"``) or its geometric mean
  (``level="geometric"``, length-invariant; the default, bounds [0.5, 2]). A dropped sequence still counts
  in the loss normaliser (its tokens add 0), so the update shrinks by the share dropped, which is reported.

All functions are pure: [B, T] tensors of per-response-token log-probs with a boolean ``mask``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from reasoning_rl.config import RolloutCorrectionConfig

MisLevel = Literal["sequence", "geometric"]
LOG_CLAMP = 20.0  # exp() stays finite; a log-ratio of 20 nats is far past any cap anyway


def _log_ratio(old: Tensor, rollout: Tensor, mask: Tensor) -> Tensor:
    return ((old.float() - rollout.float()) * mask).clamp(-LOG_CLAMP, LOG_CLAMP)


def tis_weights(old: Tensor, rollout: Tensor, mask: Tensor, cap: float) -> Tensor:
    """Token-level truncated IS weights ``min(exp(old - rollout), cap)`` [B, T]; 0 on padding."""
    return torch.exp(_log_ratio(old, rollout, mask)).clamp(max=cap) * mask


def sequence_ratio(old: Tensor, rollout: Tensor, mask: Tensor, level: MisLevel) -> Tensor:
    """Per-sequence IS ratio [B]: exp(sum of token log-ratios), or exp(their mean) for ``geometric``."""
    total = _log_ratio(old, rollout, mask).sum(-1)
    if level == "geometric":
        total = total / mask.sum(-1).clamp(min=1)
    return torch.exp(total.clamp(-LOG_CLAMP, LOG_CLAMP))


def mis_keep(old: Tensor, rollout: Tensor, mask: Tensor, low: float, high: float, level: MisLevel) -> Tensor:
    """[B] bool: the sequences whose IS ratio lies in ``[low, high]`` (the others are masked out)."""
    ratio = sequence_ratio(old, rollout, mask, level)
    return (ratio >= low) & (ratio <= high)


def correction_weights(
    old: Tensor, rollout: Tensor, mask: Tensor, cfg: RolloutCorrectionConfig
) -> tuple[Tensor, dict[str, float]]:
    """[B, T] per-token loss weights (TIS x MIS keep, detached) and what they did (means over real tokens).
    ``cfg.tis_cap=None`` / ``cfg.mis=False`` switch the parts off (``cfg.enabled`` is the caller's switch)."""
    m = mask.to(torch.float32)
    w = tis_weights(old, rollout, m, cfg.tis_cap) if cfg.tis_cap is not None else m.clone()
    stats: dict[str, float] = {}
    n = float(m.sum().clamp(min=1))
    if cfg.tis_cap is not None:
        raw = torch.exp(_log_ratio(old, rollout, m))
        stats["correction/tis_clipped_frac"] = float(((raw > cfg.tis_cap) & mask.bool()).sum()) / n
    if cfg.mis:
        keep = mis_keep(old, rollout, m, cfg.mis_low, cfg.mis_high, cfg.mis_level)
        w = w * keep[:, None].to(w.dtype)
        stats["correction/mis_dropped_frac"] = 1.0 - float(keep.float().mean()) if keep.numel() else 0.0
    stats["correction/weight_mean"] = float(w.sum()) / n
    return w.detach(), stats


def mismatch_metrics(
    trainer: Tensor, rollout: Tensor, mask: Tensor, threshold: float = 0.5
) -> dict[str, float]:
    """How far the engine's sampling log-probs are from the trainer's on the same tokens.

    ``mismatch/kl``: k3 estimate of KL(pi_rollout || pi_trainer) per token (r - 1 - log r, r = p_trainer /
    p_rollout: unbiased for samples drawn by the engine, never negative); ``mismatch/k1``: mean log-ratio;
    ``mismatch/max_abs``: largest |delta log p|; ``mismatch/frac_over``: share of tokens with |delta| > threshold.
    """
    valid = mask.bool()
    if not bool(valid.any()):
        return {}
    delta = (trainer.float() - rollout.float())[valid].clamp(-LOG_CLAMP, LOG_CLAMP)
    k3 = torch.expm1(delta) - delta
    return {
        "mismatch/kl": float(k3.mean()),
        "mismatch/k1": float(delta.mean()),
        "mismatch/max_abs": float(delta.abs().max()),
        "mismatch/frac_over": float((delta.abs() > threshold).float().mean()),
    }
