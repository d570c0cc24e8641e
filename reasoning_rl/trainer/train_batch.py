"""Rollouts -> TrainBatch: rewards, loss mask, old/ref log-probs, values and advantages. The models only
score tokens here; every formula is a call into ``reasoning_rl.algorithms``."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from reasoning_rl.algorithms import (
    compute_advantages,
    explained_variance,
    gae_targets,
    kl_penalized_rewards,
    token_rewards,
)
from reasoning_rl.algorithms.decoupled import behaviour_weights
from reasoning_rl.algorithms.rollout_correction import correction_weights, mismatch_metrics
from reasoning_rl.config import RolloutCorrectionConfig
from reasoning_rl.factory import Models
from reasoning_rl.policy.batch import build_batch
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.plan import StepPlan
from reasoning_rl.trainer.records import Rollouts, TrainBatch
from reasoning_rl.trainer.rewards import rewards_and_mask


def make_train_batch(
    rollouts: Rollouts, models: Models, plan: StepPlan, *, trace: TraceWriter, step: int
) -> tuple[TrainBatch | None, dict[str, float]]:
    """The judged samples (masked ones are dropped entirely: no gradient, no share of any normaliser) with
    everything the update needs, and the batch's metrics; None when no sample was judged."""
    a = plan.algorithm
    rewards, judged = rewards_and_mask(rollouts.samples, max_tokens=plan.max_tokens, overlong=a.overlong)
    keep = [i for i, s in enumerate(rollouts) if bool(judged[i]) and s.completion.token_ids]
    if not keep:
        return None, {}
    samples = [rollouts.samples[i] for i in keep]
    tokens = build_batch([s.completion for s in samples], pad_id=plan.pad_id)
    batch = TrainBatch(
        tokens,
        [s.id for s in samples],
        torch.tensor([s.group for s in samples]),
        rewards[keep],
        advantages=torch.zeros(len(keep)),
        old_source=plan.old_source,
    )
    out: dict[str, float] = {}
    if plan.old_source == "recompute":
        with trace.span("old_logprobs", step):
            batch.recomputed_logprobs, _ = models.policy.logprobs(tokens)
        out.update(logprob_gap(batch, a.rollout_correction.mismatch_threshold))
    if a.rollout_correction.enabled or plan.decoupled:
        out.update(correct_mismatch(batch, a.rollout_correction, decoupled=plan.decoupled))
    if models.ref is not None:
        with trace.span("ref_logprobs", step):
            batch.ref_logprobs = models.ref.logprobs(tokens)
    kl_ref = batch.ref_logprobs if a.uses_kl_reward else None
    mask = batch.loss_mask
    if a.advantage == "gae":  # PPO: the config pairs it with name=ppo, which builds the critic
        with trace.span("values", step):
            batch.values = models.critic.values(tokens)
        token_r = token_rewards(batch.rewards, mask, a.kl_coef, batch.old_logprobs, kl_ref, a.kl_estimator)
        batch.advantages, batch.returns = gae_targets(token_r, batch.values, mask, a.gamma, a.lam)
        out.update(critic_metrics(batch.values, batch.returns, mask))
    else:
        if kl_ref is not None:
            batch.rewards = kl_penalized_rewards(
                batch.rewards, _old(batch), kl_ref, mask, a.kl_coef, a.kl_estimator
            )
        batch.advantages = compute_advantages(a.advantage, batch.rewards, batch.group_ids)
    adv = batch.advantages
    out["advantage/abs_mean"] = float(adv.abs()[mask].mean() if adv.dim() == 2 else adv.abs().mean())
    return batch, out


def _old(batch: TrainBatch) -> Tensor:
    old = batch.old_logprobs
    if old is None:  # old_logprob_source never picks the policy's own when the numbers are needed
        raise ValueError("a KL penalty in the reward needs old log-probs from the engine or a recompute")
    return old


def logprob_gap(batch: TrainBatch, threshold: float) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's for the same tokens (kernel/dtype drift,
    or a broken hand-off when large): reported, never hidden (``mismatch/*``: rollout_correction.py)."""
    if batch.rollout_logprobs is None or batch.recomputed_logprobs is None:
        return {}
    diff = (batch.recomputed_logprobs.float() - batch.rollout_logprobs.float()).abs()[batch.loss_mask]
    return {
        "rollout/logprob_diff_mean": float(diff.mean()),
        "rollout/logprob_diff_max": float(diff.max()),
        **mismatch_metrics(batch.recomputed_logprobs, batch.rollout_logprobs, batch.loss_mask, threshold),
    }


def correct_mismatch(
    batch: TrainBatch, cfg: RolloutCorrectionConfig, *, decoupled: bool = False
) -> dict[str, float]:
    """Set the batch's TIS/MIS loss weights from its recomputed vs rollout log-probs (the plan recomputes
    whenever the correction is on); what the weights did. ``decoupled`` (continuous rollouts): the same
    weights as decoupled PPO's behaviour correction, recompute = proximal policy (algorithms/decoupled.py)."""
    if batch.recomputed_logprobs is None or batch.rollout_logprobs is None:
        raise RuntimeError(
            "algorithm.rollout_correction needs the engine's sampling log-probs and the trainer's "
            "recompute (the engine returned none for this batch)"
        )
    weigh = behaviour_weights if decoupled else correction_weights
    batch.correction_weights, stats = weigh(
        batch.recomputed_logprobs, batch.rollout_logprobs, batch.loss_mask, cfg
    )
    return stats


def critic_metrics(values: Tensor, returns: Tensor, mask: Tensor) -> dict[str, float]:
    out = {
        "critic/values_mean": float(values[mask].mean()),
        "critic/returns_mean": float(returns[mask].mean()),
    }
    ev = explained_variance(values, returns, mask)
    if math.isfinite(ev):
        out["critic/explained_variance"] = ev
    return out
