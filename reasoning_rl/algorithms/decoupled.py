"""Decoupled PPO: the loss of continuous rollouts, whose samples come from older policy versions (issue 31).

Three policies (Hilton et al., "Batch size-invariance for policy optimization", 2022; AReaL, Fu et al. 2025):
the behaviour policy mu that sampled each token (the engine's log-probs, each token from the version that was
live when it was generated), the proximal policy pi_prox (the trainer's own log-probs at the start of the step:
the recompute) and pi_theta, being trained. Per response token t of sample i:

    r_it = pi_theta / pi_prox                                  (the PPO ratio, against the proximal policy)
    w_it = sg[ min(pi_prox / mu, C) ] * m_i                    (the behaviour correction, detached)
    L    = (1/Z) sum_it w_it * max(-A_it r_it, -A_it clip(r_it, 1 - eps_low, 1 + eps_high))

so the trust region is around the policy the trainer holds now, however stale the behaviour policy is, and the
importance weight pi_prox/mu corrects for where the samples came from. ``C`` is ``rollout_correction.tis_cap``
(None: untruncated, not off) and ``m_i`` the MIS keep of ``rollout_correction.mis`` (the sequence ratio of the same
pi_prox/mu inside [mis_low, mis_high]); Z is ``algorithm.loss_agg``'s normaliser. TIS/MIS in a synchronous run
weigh by the same ratio (there mu and pi_prox differ only by kernels), so composed, the one weight is applied
once: ``behaviour_weights`` is ``rollout_correction.correction_weights`` on (proximal, behaviour). The loss is
``losses.policy_loss`` with ``old_logprobs = proximal`` and ``token_weights = w``.

The effective sample size of the weights, ESS = (sum w)^2 / (N sum w^2) over the N response tokens, is in
(0, 1]: 1 when every weight is equal, small when a few tokens carry the update.
"""

from __future__ import annotations

import math

from torch import Tensor

from reasoning_rl.algorithms.rollout_correction import correction_weights
from reasoning_rl.config import RolloutCorrectionConfig


def effective_sample_size(weights: Tensor, mask: Tensor) -> float:
    """Normalised ESS of per-token weights over the real tokens: (sum w)^2 / (N sum w^2); 1.0 with no tokens."""
    w = weights.float()[mask.bool()]
    square = float(w.square().sum())
    if w.numel() == 0 or square == 0.0:
        return 1.0
    return float(w.sum()) ** 2 / (w.numel() * square)


def behaviour_weights(
    proximal: Tensor, behaviour: Tensor, mask: Tensor, cfg: RolloutCorrectionConfig
) -> tuple[Tensor, dict[str, float]]:
    """``w_it`` above [B, T] (detached, 0 on padding) and what it did: TIS/MIS statistics and the ESS. Unlike
    TIS alone, ``tis_cap=None`` keeps the weight (untruncated): the behaviour correction is part of the loss."""
    if cfg.tis_cap is None:
        cfg = cfg.model_copy(update={"tis_cap": math.inf})
    weights, stats = correction_weights(proximal, behaviour, mask, cfg)
    stats["decoupled/ess"] = effective_sample_size(weights, mask)
    return weights, stats
