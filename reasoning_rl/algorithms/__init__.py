"""RL algorithms as pure tensor functions, one module per concept: outcome advantage estimators
(``advantages``), GAE and PPO's token rewards (``gae``), batch whitening (``whiten``), KL estimators
(``kl``), policy/value losses (``losses``) and split-invariant aggregation (``aggregation``)."""

from reasoning_rl.algorithms.advantages import Estimator, compute_advantages
from reasoning_rl.algorithms.aggregation import AGG_MODES, AggMode, aggregate, compute_normalizer, masked_mean
from reasoning_rl.algorithms.gae import compute_gae, explained_variance, gae_targets, token_rewards
from reasoning_rl.algorithms.kl import KLEstimator, kl_estimate, kl_penalized_rewards
from reasoning_rl.algorithms.losses import LossConfig, policy_loss, value_loss
from reasoning_rl.algorithms.whiten import whiten
from reasoning_rl.registry import ESTIMATORS

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
    "explained_variance",
    "gae_targets",
    "kl_estimate",
    "kl_penalized_rewards",
    "masked_mean",
    "policy_loss",
    "token_rewards",
    "value_loss",
    "whiten",
]
