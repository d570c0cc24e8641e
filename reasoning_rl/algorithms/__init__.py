"""RL algorithms as pure tensor functions: advantages, policy/value losses, KL, aggregation."""

from reasoning_rl.algorithms.advantages import ESTIMATORS, Estimator, compute_advantages, compute_gae
from reasoning_rl.algorithms.aggregation import AGG_MODES, AggMode, aggregate, compute_normalizer, masked_mean
from reasoning_rl.algorithms.kl import KLEstimator, kl_estimate, kl_penalized_rewards
from reasoning_rl.algorithms.losses import LossConfig, policy_loss, value_loss

__all__ = [
    "AGG_MODES",
    "ESTIMATORS",
    "AggMode",
    "Estimator",
    "KLEstimator",
    "LossConfig",
    "aggregate",
    "compute_advantages",
    "compute_gae",
    "compute_normalizer",
    "kl_estimate",
    "kl_penalized_rewards",
    "masked_mean",
    "policy_loss",
    "value_loss",
]
